"""Read the pins: one file per sglang release, ``pins/sglang-<release>.txt``.

Each line is ``name==version  # why``; ``-r shared.txt`` includes the lines every release
carries at the same version, so they are written once. Exact pins only: the runner installs
with ``--no-deps``, so a range would make the build depend on the day it ran. The comment is
kept because the manifest and the build table show why each wheel travels. A package pinned
twice (in one file or across an include) is an error, so a release cannot quietly override a
shared line: the line moves out of ``shared.txt`` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PINS_DIR = Path(__file__).with_name("pins")
SGLANG = "sglang"

_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)\s*(?:#\s*(?P<why>.*))?$")
_INCLUDE = re.compile(r"^-r\s+(?P<file>\S+)$")
_RELEASE_FILE = re.compile(r"^sglang-(?P<release>\d+(?:\.\d+)+)\.txt$")


def normalize(name: str) -> str:
    """PEP 503 name, so ``pydantic_core`` in a wheel file name matches ``pydantic-core``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    why: str

    @property
    def key(self) -> str:
        return normalize(self.name)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def releases(pins_dir: Path = PINS_DIR) -> list[str]:
    """The sglang releases that have a pins file, oldest first."""
    found = [match["release"] for path in pins_dir.iterdir() if (match := _RELEASE_FILE.match(path.name))]
    return sorted(found, key=_release_key)


def release_file(release: str, pins_dir: Path = PINS_DIR) -> Path:
    path = pins_dir / f"sglang-{release}.txt"
    if not path.is_file():
        raise ValueError(f"no pins for sglang {release} in {pins_dir}; "
                         f"known releases: {', '.join(releases(pins_dir))}")
    return path


def _read(path: Path, pins: list[Pin], seen: dict[str, str], including: tuple[Path, ...]) -> None:
    if path in including:
        raise ValueError(f"{path}: included from itself ({' -> '.join(p.name for p in including)})")
    if not path.is_file():
        raise ValueError(f"{including[-1]}: includes {path.name}, which does not exist")
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{lineno}"
        if include := _INCLUDE.match(line):
            _read(path.parent / include["file"], pins, seen, (*including, path))
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{where}: expected 'name==version  # why' or '-r FILE', got {raw!r}")
        pin = Pin(match["name"], match["version"], (match["why"] or "").strip())
        if pin.key in seen:
            raise ValueError(f"{where}: {pin.name} is already pinned at {seen[pin.key]}")
        seen[pin.key] = where
        pins.append(pin)


def read_pins(path: Path) -> list[Pin]:
    """Parse a pins file and its includes; raise ValueError naming the file and line."""
    pins: list[Pin] = []
    _read(path, pins, {}, ())
    if not pins:
        raise ValueError(f"{path}: no pins found")
    return pins


def read_release(release: str, pins_dir: Path = PINS_DIR) -> list[Pin]:
    """The pins of one sglang release; its file must pin that very sglang."""
    path = release_file(release, pins_dir)
    pins = read_pins(path)
    pinned = [pin.version for pin in pins if pin.key == SGLANG]
    if pinned != [release]:
        raise ValueError(f"{path}: must pin sglang=={release}, pins {pinned or 'no sglang'}")
    return pins
