"""The packets under findings/: one per sglang bug the harness found, its facts as strict data.

``findings/<slug>/finding.yaml`` says what a maintainer needs to act on the bug: its upstream status
read from the threads (new, a duplicate of a thread, or fixed in a release of sglang or of the kernel
library), the project whose code is wrong, the releases it affects, where the code is, a serving
configuration that reaches it, and the KNOWN_FAILURES.md entries of its cells. The ledger
(harness/ledger/known_failures.py) holds its entries to these facts; ``python -m harness findings``
(harness/bugs/findings.py) lists, runs, records and renders them.
"""

from __future__ import annotations

import re
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness import ROOT
from harness.base.releases import KNOWN_RELEASES

FINDINGS_DIR = ROOT / "findings"
PROJECTS = ("sglang", "flashinfer", "flash-attention")  # where a root cause can live
THREAD = r"^[\w.-]+/[\w.-]+#\d+$"  # owner/repo#N: an issue or a pull request
TRACKING = ("same bug", "fix proposed", "fixed it")  # relations that make a thread the one a ledger entry cites


class FindingError(ValueError):
    """A packet is malformed; the message names the file and the field."""


class Thread(BaseModel):
    """One upstream thread read for the finding, as it stood when read."""

    model_config = ConfigDict(extra="forbid", strict=True)
    thread: str = Field(description="owner/repo#N")
    state: Literal["open", "closed", "merged", "closed unmerged"]
    relation: Literal["same bug", "fix proposed", "introduced it", "fixed it", "same class", "related"]
    note: str = Field(min_length=1, description="what the thread says, in a sentence")

    @field_validator("thread")
    @classmethod
    def _owner_repo_number(cls, value: str) -> str:
        if not re.fullmatch(THREAD, value):
            raise ValueError(f"'{value}' is no thread reference; write owner/repo#N, e.g. sgl-project/sglang#34239")
        return value

    @property
    def url(self) -> str:
        repo, number = self.thread.split("#")
        return f"https://github.com/{repo}/issues/{number}"


class CodePath(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    releases: str = Field(min_length=1, description="the sglang releases this path holds for, e.g. 0.5.17-0.5.23")
    where: str = Field(min_length=1, description="file:function (lines) where the bug lives")


class Serving(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    config: str = Field(min_length=1, description="one real configuration that reaches it: model, TP/DP, backend, flags")
    needs_speculative: bool
    why: str = Field(min_length=1)


class Finding(BaseModel):
    """finding.yaml: what a maintainer needs to act on one bug."""

    model_config = ConfigDict(extra="forbid", strict=True)
    title: str = Field(min_length=1)
    status: Literal["new", "duplicate", "fixed"] = Field(
        description="new: no upstream thread; duplicate: a thread tracks the same bug (say what this adds); "
                    "fixed: a released sglang or kernel library fixes it (fixed_in)")
    root_cause: Literal[PROJECTS] = Field(description="the project whose code is wrong")
    fixed_in: str | None = Field(default=None, description="'<project> <release> (<thread>)' where status is fixed")
    affected: list[str] = Field(min_length=1, description="sglang releases whose stock stack shows it")
    code_path: list[CodePath] = Field(min_length=1)
    serving: Serving
    upstream: list[Thread] = Field(default=[], description="threads read; status duplicate needs a 'same bug' one")
    read_on: str = Field(min_length=1, description="when the threads were read, and how current the copy was")
    adds: str | None = Field(default=None, description="what this finding adds to the threads (duplicates)")
    known_failures: list[str] = Field(default=[], description="KNOWN_FAILURES.md entries of its cells")
    fix: str | None = Field(default=None, min_length=1,
                            description="the harness fix (harness/bugs/seed_bugs.py FIXES) fix.diff is made from; "
                                        "left out where no fix is clear (then say why in no_fix)")
    no_fix: str | None = Field(default=None, min_length=1, description="why the packet proposes no fix")

    @model_validator(mode="after")
    def _status_has_its_evidence(self) -> "Finding":
        unknown = [release for release in self.affected if release not in KNOWN_RELEASES]
        if unknown:
            raise ValueError(f"affected: {unknown[0]} is no known release ({', '.join(KNOWN_RELEASES)})")
        if self.status == "fixed" and not self.fixed_in:
            raise ValueError("fixed_in: required where status is fixed ('<project> <release> (<thread>)')")
        if self.status != "fixed" and self.fixed_in:
            raise ValueError(f"fixed_in: given, but status is {self.status}; a fixed bug says status: fixed")
        same = [thread for thread in self.upstream if thread.relation == "same bug"]
        if self.status == "duplicate" and not (same and self.adds):
            raise ValueError("upstream: a duplicate names the thread of the same bug (relation: same bug) and says "
                             "what it adds (adds)")
        if (self.fix is None) == (self.no_fix is None):
            raise ValueError("fix: name the harness fix, or leave it out and say why in no_fix (one of the two)")
        if self.status == "new" and same:
            raise ValueError(f"status: new, but {same[0].thread} is the same bug; say status: duplicate")
        return self

    def affects(self, release: str) -> bool:
        return release in self.affected


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(the file)"
    return f"field '{field}': {first['msg']}"


def load(slug: str) -> Finding:
    path = FINDINGS_DIR / slug / "finding.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise FindingError(f"{path.relative_to(ROOT)}: {error}") from None
    try:
        return Finding.model_validate(data)
    except ValidationError as error:
        raise FindingError(f"{path.relative_to(ROOT)}: {_one_line(error)}") from None


def slugs() -> list[str]:
    return sorted(path.parent.name for path in FINDINGS_DIR.glob("*/finding.yaml"))


def load_all() -> dict[str, Finding]:
    return {slug: load(slug) for slug in slugs()}


def upstream_status(finding: Finding) -> str:
    """The status in one phrase: new, duplicate of <thread>, or fixed in <release>."""
    if finding.status == "fixed":
        return f"fixed in {finding.fixed_in}"
    if finding.status == "duplicate":
        same = [thread.thread for thread in finding.upstream if thread.relation == "same bug"]
        return f"duplicate of {', '.join(same)}"
    return "new"


def fixed_release(finding: Finding) -> str | None:
    """The release fixed_in names ('flashinfer 0.7.1 (...)' -> '0.7.1'), or None."""
    return finding.fixed_in.split()[1] if finding.fixed_in else None


def tracking_threads(finding: Finding) -> list[str]:
    return [thread.thread for thread in finding.upstream if thread.relation in TRACKING]
