"""The sglang releases attn-harness knows, and which one is installed.

Every contract that differs between releases (an API call, a seq_lens convention, a
buffer-sizing rule, a seed bug's code) is data keyed by the first release it holds
for, resolved once against the installed sglang by ``since``. Nothing outside
the registries branches on a version string.

Support policy, stated once:
- a known release runs with its own contracts;
- a newer release, or a source checkout (an editable install of sglang's
  ``python/`` folder, whose version reads e.g. ``0.5.24.dev12+g1a2b3c``), runs
  with the newest known contracts and says so in one line;
- a release older than the oldest known stops with a clear error.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Generic, Mapping, TypeVar

from harness.base.platform import installed_version

KNOWN_RELEASES = ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
NEWEST = KNOWN_RELEASES[-1]

T = TypeVar("T")


class UnsupportedVersionError(RuntimeError):
    """The installed sglang is missing or older than any release whose contracts we have read."""


def version_key(version: str) -> tuple[int, ...]:
    """(0, 5, 17) for "0.5.17", "0.5.17.post1" and "0.5.17rc2"; dev/local suffixes are dropped."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    if not numbers:
        raise UnsupportedVersionError(f"sglang reports version {version!r}, which is not a release number")
    return tuple(int(part) for part in numbers.group(0).split("."))


@dataclass(frozen=True)
class Installed:
    version: str  # what the installed sglang reports
    contracts: str  # the known release whose contracts apply
    note: str | None  # one line when the two differ (newer than known, or a source checkout)


def contracts_of(version: str) -> str:
    """The known release whose contracts apply to sglang ``version``: the newest at or below it."""
    key = version_key(version)
    if key < version_key(KNOWN_RELEASES[0]):
        raise UnsupportedVersionError(
            f"sglang {version} is older than {KNOWN_RELEASES[0]}, the oldest release attn-harness knows "
            f"({', '.join(KNOWN_RELEASES)}); install one of those")
    return max((r for r in KNOWN_RELEASES if version_key(r) <= key), key=version_key)


@lru_cache(maxsize=1)
def installed() -> Installed:
    version = installed_version("sglang")
    if version is None:
        raise UnsupportedVersionError(
            f"sglang is not installed; `bash .ci/install` installs sglang {NEWEST} into .venv "
            "(see docs/releases.md)")
    key, contracts = version_key(version), contracts_of(version)
    note = None
    if not re.fullmatch(r"[\d.]+(?:\.post\d+)?", version):
        note = (f"sglang {version} is a source checkout or pre-release; running with the contracts of "
                f"{contracts}, the newest known release at or below it")
    elif version_key(contracts) < key:
        note = (f"sglang {version} is newer than the newest known release; running with the contracts "
                f"of {contracts}")
    return Installed(version, contracts, note)


@lru_cache(maxsize=None)
def sglang_source(module: str) -> str | None:
    """The installed sglang's source of ``module``, read once and without importing it (a registry that
    quotes sglang asks whether this release still says so), or None where this release has no such module."""
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent package this release lacks
        return None
    return Path(found.origin).read_text() if found and found.origin else None


class since(Generic[T]):
    """A contract that changed between releases: {first release it holds for: value}.

    ``since({"0.5.17": a, "0.5.21": b}).value`` is ``b`` on 0.5.21 and later, ``a`` before.
    """

    def __init__(self, table: Mapping[str, T]):
        unknown = [r for r in table if r not in KNOWN_RELEASES]
        if unknown or KNOWN_RELEASES[0] not in table:
            raise ValueError(f"since(): keys must be known releases and include {KNOWN_RELEASES[0]}; got {list(table)}")
        self.table = dict(sorted(table.items(), key=lambda item: version_key(item[0])))

    def at(self, release: str) -> T:
        key = version_key(release)
        return [value for first, value in self.table.items() if version_key(first) <= key][-1]

    @property
    def value(self) -> T:
        return self.at(installed().contracts)
