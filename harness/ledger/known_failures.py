"""The known-failures ledger: KNOWN_FAILURES.md, readable Markdown that is also strict data.

Each entry selects cells (backend, mode, runner, cases; optionally the sglang releases the bug is in,
matched against the installed release), must cite where the bug is tracked
upstream, and gives the bug's signature: its failure class (harness/ledger/failure_class.py) and, for
a numeric class, the max_abs_err range it was measured with and a margin. A selected cell is a
strict xfail only while it fails inside that signature: a fixed bug surfaces as an unexpected
pass, and a second bug in the same cells (another class, or an error far from the measured one)
as a new failure, instead of either hiding behind the entry. The reports list entries that
matched no executed cell (stale). A typo here must fail loudly, never silently widen or empty a
selection, hence the strict parser.

Format (see KNOWN_FAILURES.md): every `## ` heading outside code fences opens an entry and must
read `## KF-<slug>`; directly below it a bullet list of `- field: value` lines (a longer value
continues on indented lines); free prose after the first line that is not a bullet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Iterable, Mapping

from harness import ROOT
from harness.base import platform
from harness.case.case_traits import TRAITS
from harness.ledger.failure_class import AFTER_NUMBERS, FAILURE_CLASSES, GPU_ONLY, MEASURED, Failure
from harness.bugs.finding_packets import PROJECTS, Finding, FindingError, fixed_release, load_all, tracking_threads
from harness.base.releases import KNOWN_RELEASES, version_key
from harness.runners import RUNNER_NAMES as RUNNERS
from harness.bugs.seed_bugs import FIXES, requested_fixes

GENERATED_CASES = "gen"  # the generated tier's case names begin so (harness/search/generated.py generated_name)

KNOWN_FAILURES_FILE = ROOT / "KNOWN_FAILURES.md"

# field -> what a valid value looks like (quoted in errors). Selector values are comma-separated
# globs (fnmatch: * ? [...]); backticks around a glob are allowed and stripped, so that
# `*-tree-*` is not rendered as emphasis.
SELECTOR_FIELDS = {
    "backend": "comma-separated globs over the backend name, e.g. 'fa4', 'fa3, fa4' or '*'",
    "mode": "comma-separated globs over the mode, e.g. 'target_verify', 'draft_*' or '*'",
    "runner": f"one or more of {', '.join(RUNNERS)} or *",
    "cases": "comma-separated globs over the cell_id or the case name, e.g. '`*-tree-*`' or 'tree-bs3-topk2'",
}
TEXT_FIELDS = {
    "reason": "one sentence: what goes wrong",
    "upstream": ("the thread that tracks the bug, an issue or a pull request: owner/repo#N, repo#N for "
                 "sglang, flashinfer or flash-attention, or its github.com URL; or 'new: <finding>' for a bug no "
                 "thread tracks yet, whose packet is findings/<finding>/"),
}
SIGNATURE_FIELDS = {
    "class": (f"the failure class, or the classes one bug was measured to show as, comma-separated: "
              f"among {', '.join(FAILURE_CLASSES)}"),
    "max_abs_err": (f"for class {' or '.join(MEASURED)} (among the classes) only, and required there: the range measured and the "
                    "margin it may move by, '<low>-<high>, margin x<k>' with 0 < low <= high and k >= 1, "
                    "e.g. '0.0036-0.0156, margin x2' (covers 0.0018 to 0.0312)"),
}
OPTIONAL_FIELDS = {
    "releases": (f"comma-separated globs over the sglang release whose contracts apply, among "
                 f"{', '.join(KNOWN_RELEASES)}, e.g. '0.5.1[7-9], 0.5.2[0-2]' for a bug fixed in 0.5.23; "
                 "left out, every release"),
    "traits": (f"comma-separated case traits the cell's case must all have, among {', '.join(TRAITS)} "
               "(harness/case/case_traits.py): a fact about the state no cell name shows"),
    "evidence": "where the failure was seen: a report path, a CI link, numbers",
    "fixed_by": f"the harness fix that makes these cells pass, one of {', '.join(FIXES)} (harness/bugs/seed_bugs.py): "
                "under --apply-fix with it the entry stands aside",
    "root_cause": (f"where the bug's root cause lives when it is not sglang's own code: one of "
                   f"{', '.join(p for p in PROJECTS if p != 'sglang')}, then 'fixed in <release>' (of that project, or "
                   "'fixed in sglang <release>' for code sglang vendors) or 'not fixed yet', e.g. "
                   "'flashinfer, fixed in 0.7.1'"),
}
RETIRED_FIELD = "retired_into"
RETIRED_WHY = ("the entries an entry was the sum of, comma-separated KF ids: a retired entry keeps its heading, "
               "so records that carry its id still find where it went, and takes no other field")
FIELDS = {**SELECTOR_FIELDS, **TEXT_FIELDS, **SIGNATURE_FIELDS, **OPTIONAL_FIELDS, RETIRED_FIELD: RETIRED_WHY}
REQUIRED_FIELDS = (*SELECTOR_FIELDS, *TEXT_FIELDS, "class")

_ID = re.compile(r"KF-[a-z0-9]+(?:-[a-z0-9]+)*")
_FIELD_LINE = re.compile(r"- ([A-Za-z_]+):(.*)")
_THREAD_URL = re.compile(r"https://github\.com/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)/(?:issues|pull)/(?P<number>\d+)/?")
_THREAD_REF = re.compile(r"(?:(?P<owner>[\w.-]+)/)?(?P<repo>[\w.-]+)#(?P<number>\d+)")
_NEW_FINDING = re.compile(r"new: (?P<finding>\S+)")
OWNERS = {"sglang": "sgl-project", "flashinfer": "flashinfer-ai", "flash-attention": "Dao-AILab"}  # for repo#N
_ROOT_CAUSE = re.compile(r"(?P<project>[\w-]+), (?:fixed in (?:(?P<vendor>sglang) )?(?P<release>\d+(?:\.\d+)+\S*)|"
                         r"(?P<open>not fixed yet))")
_FENCE = re.compile(r"\s*(```|~~~)")
_NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"(?P<low>{_NUMBER})\s*-\s*(?P<high>{_NUMBER})\s*,\s*margin\s+x(?P<margin>{_NUMBER})")


class KnownFailuresError(ValueError):
    """KNOWN_FAILURES.md is malformed; the message names the line, the entry and the field."""


class InsideSignature(Exception):
    """A covered cell failed the way its entry says: the one exception its xfail mark accepts."""


class OutsideSignature(AssertionError):
    """A covered cell failed another way than its entry says: a new failure."""


@dataclass(frozen=True)
class ErrorRange:
    """max_abs_err as measured (low to high) and the factor it may move by either way."""

    low: float
    high: float
    margin: float

    @property
    def bounds(self) -> tuple[float, float]:
        return self.low / self.margin, self.high * self.margin

    def __contains__(self, value: float) -> bool:
        low, high = self.bounds
        return low <= value <= high

    def __str__(self) -> str:
        low, high = self.bounds
        return f"{low:.3g}-{high:.3g} (measured {self.low:g}-{self.high:g}, margin x{self.margin:g})"


@dataclass(frozen=True)
class RootCause:
    """A bug whose root cause lives in another project, and the release that fixes it there (or None)."""

    project: str
    fixed_in: str | None  # a release of ``project``, or of sglang where ``vendored``
    vendored: bool = False  # fixed in sglang's own copy of the project's code

    def __str__(self) -> str:
        where = f"sglang {self.fixed_in}" if self.vendored else self.fixed_in
        return f"{self.project}, {'fixed in ' + where if self.fixed_in else 'not fixed yet'}"


@dataclass(frozen=True)
class Retired:
    """A heading kept for an entry that turned out to be the sum of others (retired_into)."""

    id: str
    into: tuple[str, ...]
    source: str


def _thread(text: str) -> str | None:
    """owner/repo#N for an issue or pull-request reference, or None where ``text`` is not one."""
    found = _THREAD_URL.fullmatch(text) or _THREAD_REF.fullmatch(text)
    if not found:
        return None
    owner = found["owner"] or OWNERS.get(found["repo"])
    return f"{owner}/{found['repo']}#{found['number']}" if owner else None


@dataclass(frozen=True)
class KnownFailure:
    id: str
    backend: tuple[str, ...]
    mode: tuple[str, ...]
    runner: tuple[str, ...]
    cases: tuple[str, ...]
    reason: str
    upstream: str
    failure_classes: tuple[str, ...]  # the signature: keys of FAILURE_CLASSES ...
    max_abs_err: ErrorRange | None  # ... and, for the MEASURED ones among them, the error's range
    evidence: str | None
    source: str  # "KNOWN_FAILURES.md:12", the entry's heading
    fixed_by: str | None = None  # a harness fix (seed_bugs.FIXES) under which these cells must pass
    releases: tuple[str, ...] = ("*",)  # the sglang releases (contracts) the bug is in
    traits: tuple[str, ...] = ()  # case traits (harness/case/case_traits.py) a covered cell's case has, all of them
    root_cause: RootCause | None = None  # set where the bug lives outside sglang's own code

    @property
    def thread(self) -> str | None:
        """The upstream thread as owner/repo#N, or None for a bug cited as 'new: <finding>'."""
        return None if self.upstream.startswith("new: ") else _thread(self.upstream)

    @property
    def new_finding(self) -> str | None:
        found = _NEW_FINDING.fullmatch(self.upstream)
        return found["finding"] if found else None

    @property
    def selects_generated_only(self) -> bool:
        """Every case glob names generated cases: only a run with a generated tier can meet the entry."""
        return all(glob.startswith(GENERATED_CASES) for glob in self.cases)

    def matches(self, cell: Mapping, release: str | None = None) -> bool:
        """True when the cell (needs cell_id, case, backend, mode, runner, traits) is in this entry's
        scope on ``release`` (the contracts a run used; default the installed sglang's)."""
        return (
            self.in_release(release)
            and _any_match(self.backend, cell["backend"])
            and _any_match(self.mode, cell["mode"])
            and _any_match(self.runner, cell["runner"])
            and (_any_match(self.cases, cell["cell_id"]) or _any_match(self.cases, cell["case"]))
            and set(self.traits) <= set(cell.get("traits") or ())
        )

    @property
    def masks_numbers(self) -> bool:
        """Does a covered cell fail before its numbers say anything? Not for a failure it shows only once
        they pass (host-sync): the generated tier still draws such cells (harness/search/generated.py)."""
        return not set(self.failure_classes) <= set(AFTER_NUMBERS)

    def judgeable_here(self) -> bool:
        """Can this machine see the failure? Not where every class of the signature is a GPU
        detector's and there is no GPU: a cell passing there says nothing of the bug."""
        return platform.HAS_GPU or not set(self.failure_classes) <= set(GPU_ONLY)

    def in_release(self, release: str | None = None) -> bool:
        """Whether the bug is in ``release`` (contracts; default the installed sglang's)."""
        return _any_match(self.releases, release or _installed_release())

    @property
    def xfail_reason(self) -> str:
        return f"known failure {self.id}: {self.reason}"

    def _difference(self, failure: Failure) -> str | None:
        if failure.failure_class not in self.failure_classes:
            return (f"it fails as {failure.failure_class} ({FAILURE_CLASSES[failure.failure_class]}), "
                    f"the entry says {' or '.join(self.failure_classes)}")
        if failure.failure_class in MEASURED and (failure.max_abs_err is None or failure.max_abs_err not in self.max_abs_err):
            measured = "no finite error" if failure.max_abs_err is None else f"{failure.max_abs_err:.3g}"
            return f"max_abs_err {measured} is outside {self.max_abs_err}"
        return None

    def outside_signature(self, failure: Failure) -> str | None:
        """None when a covered cell's failure is inside this entry's signature; else the reason its
        record gives: 'outside the signature of KF-x: <what differs>; <what the cell said>'."""
        difference = self._difference(failure)
        return difference and f"outside the signature of {self.id}: {difference}; {failure.message}"

    def judge(self, failure: Failure) -> None:
        """Raise InsideSignature (an expected failure) or OutsideSignature (a new one) for a covered cell."""
        outside = self.outside_signature(failure)
        if outside is None:
            raise InsideSignature(f"{self.xfail_reason} ({failure.failure_class})")
        raise OutsideSignature(outside)


def _any_match(globs: tuple[str, ...], value: str) -> bool:
    return any(fnmatchcase(value, glob) for glob in globs)


def _installed_release() -> str:
    from harness.base.releases import installed

    return installed().contracts


@dataclass
class _RawEntry:
    id: str
    line: int
    fields: dict[str, tuple[str, int]]  # name -> (value, line)


def _split_entries(path: Path, text: str) -> list[_RawEntry]:
    """Cut the file into entries: heading plus its leading `- field: value` bullets."""
    entries: list[_RawEntry] = []
    in_fence = False
    in_fields = False  # still inside the bullet list right below a heading
    last_field: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence, in_fields = not in_fence, False
            continue
        if in_fence:
            continue
        if line.startswith("## "):
            heading = line[3:].strip()
            if not _ID.fullmatch(heading):
                raise KnownFailuresError(
                    f"{path}:{number}: heading '## {heading}' must read '## KF-<slug>' "
                    f"(lowercase letters, digits and single dashes, e.g. ## KF-fa4-tree-cuda-graph); "
                    f"every level-2 heading opens an entry"
                )
            entries.append(_RawEntry(heading, number, {}))
            in_fields, last_field = True, None
            continue
        if not in_fields:
            continue
        entry = entries[-1]
        if not line.strip():
            in_fields = bool(not entry.fields)  # blank lines may separate heading and bullets
        elif line[0].isspace() and last_field:
            value, first_line = entry.fields[last_field]
            entry.fields[last_field] = (f"{value} {line.strip()}".strip(), first_line)
        elif line.startswith("- "):
            match = _FIELD_LINE.fullmatch(line.rstrip())
            if not match:
                raise KnownFailuresError(
                    f"{path}:{number}: entry {entry.id}: bullet '{line.strip()}' must read "
                    f"'- <field>: <value>'; fields: {', '.join(FIELDS)}"
                )
            name, value = match.group(1), match.group(2).strip()
            if name in entry.fields:
                raise KnownFailuresError(
                    f"{path}:{number}: entry {entry.id}: field '{name}' given twice "
                    f"(first at line {entry.fields[name][1]}); list several globs on one line, comma-separated"
                )
            entry.fields[name] = (value, number)
            last_field = name
        else:
            in_fields = False  # prose starts
    return entries


def _comma_list(value: str) -> tuple[str, ...]:
    """A field's comma-separated items, each stripped of spaces and of the backticks Markdown needs."""
    return tuple(part.strip().strip("`").strip() for part in value.split(","))


def _selector(path: Path, entry: _RawEntry, name: str) -> tuple[str, ...]:
    value, line = entry.fields[name]
    globs = _comma_list(value)
    where = f"{path}:{line}: entry {entry.id}: field '{name}'"
    if not all(globs):
        raise KnownFailuresError(f"{where}: '{value}' has an empty item; expected {FIELDS[name]}")
    choices = {"runner": RUNNERS, "releases": KNOWN_RELEASES}.get(name)
    for glob in globs if choices else ():
        if not any(fnmatchcase(choice, glob) for choice in choices):
            raise KnownFailuresError(f"{where}: '{glob}' matches no {name.rstrip('s')}; expected {FIELDS[name]}")
    return globs


def _build(path: Path, entry: _RawEntry) -> KnownFailure:
    heading = f"{path}:{entry.line}: entry {entry.id}"
    unknown = [name for name in entry.fields if name not in FIELDS]
    if unknown:
        raise KnownFailuresError(
            f"{path}:{entry.fields[unknown[0]][1]}: entry {entry.id}: unknown field '{unknown[0]}'; "
            f"valid fields: {', '.join(FIELDS)}"
        )
    missing = [name for name in REQUIRED_FIELDS if name not in entry.fields]
    if missing:
        raise KnownFailuresError(
            f"{heading}: missing field '{missing[0]}' ({FIELDS[missing[0]]}); "
            f"required: {', '.join(REQUIRED_FIELDS)}"
        )
    for name, (value, line) in entry.fields.items():
        if not value:
            raise KnownFailuresError(
                f"{path}:{line}: entry {entry.id}: field '{name}' is empty; expected {FIELDS[name]}"
            )
    upstream, line = entry.fields["upstream"]
    if not (_thread(upstream) or _NEW_FINDING.fullmatch(upstream)):
        why = ("a link to source code is no tracking thread" if upstream.startswith("http") and "/blob/" in upstream
               else "an owner is needed for that repository" if _THREAD_REF.fullmatch(upstream) else "")
        raise KnownFailuresError(
            f"{path}:{line}: entry {entry.id}: field 'upstream' is '{upstream}'{'; ' + why if why else ''}; "
            f"expected {TEXT_FIELDS['upstream']}"
        )
    evidence = entry.fields.get("evidence")
    fixed_by = entry.fields.get("fixed_by")
    if fixed_by and fixed_by[0] not in FIXES:
        raise KnownFailuresError(f"{path}:{fixed_by[1]}: entry {entry.id}: field 'fixed_by' is '{fixed_by[0]}'; "
                                 f"expected {OPTIONAL_FIELDS['fixed_by']}")
    return KnownFailure(
        id=entry.id,
        **{name: _selector(path, entry, name) for name in SELECTOR_FIELDS},
        reason=entry.fields["reason"][0],
        upstream=upstream,
        **_signature(path, entry),
        evidence=evidence[0] if evidence else None,
        source=f"{path}:{entry.line}",
        fixed_by=fixed_by[0] if fixed_by else None,
        releases=_selector(path, entry, "releases") if "releases" in entry.fields else ("*",),
        traits=_traits(path, entry),
        root_cause=_root_cause(path, entry),
    )


def _root_cause(path: Path, entry: _RawEntry) -> RootCause | None:
    if "root_cause" not in entry.fields:
        return None
    value, line = entry.fields["root_cause"]
    found = _ROOT_CAUSE.fullmatch(value)
    if not found or found["project"] not in PROJECTS or found["project"] == "sglang":
        raise KnownFailuresError(f"{path}:{line}: entry {entry.id}: field 'root_cause' is '{value}'; expected "
                                 f"{OPTIONAL_FIELDS['root_cause']}")
    cause = RootCause(found["project"], found["release"], vendored=bool(found["vendor"]))
    if cause.vendored and cause.fixed_in not in KNOWN_RELEASES:
        raise KnownFailuresError(f"{path}:{line}: entry {entry.id}: field 'root_cause': sglang {cause.fixed_in} is no "
                                 f"known release ({', '.join(KNOWN_RELEASES)})")
    return cause


def _traits(path: Path, entry: _RawEntry) -> tuple[str, ...]:
    if "traits" not in entry.fields:
        return ()
    value, line = entry.fields["traits"]
    names = _comma_list(value)
    unknown = [name for name in names if name not in TRAITS]
    if unknown:
        raise KnownFailuresError(f"{path}:{line}: entry {entry.id}: field 'traits': '{unknown[0]}' is no case trait; "
                                 f"expected {OPTIONAL_FIELDS['traits']}")
    return names


def _signature(path: Path, entry: _RawEntry) -> dict:
    """The classes, and the error range that MEASURED classes among them require (and no others take)."""
    value, line = entry.fields["class"]
    where = f"{path}:{line}: entry {entry.id}"
    classes = _comma_list(value)
    unknown = [name for name in classes if name not in FAILURE_CLASSES]
    if unknown:
        raise KnownFailuresError(f"{where}: field 'class' is '{value}': '{unknown[0]}' is no failure class; "
                                 f"expected {SIGNATURE_FIELDS['class']}")
    measured = entry.fields.get("max_abs_err")
    if not any(name in MEASURED for name in classes):
        if measured:
            raise KnownFailuresError(f"{path}:{measured[1]}: entry {entry.id}: field 'max_abs_err': class "
                                     f"'{value}' has no error size; drop the field (only "
                                     f"{', '.join(MEASURED)} take one)")
        return dict(failure_classes=classes, max_abs_err=None)
    if not measured:
        raise KnownFailuresError(f"{where}: missing field 'max_abs_err', required for class '{value}' "
                                 f"({SIGNATURE_FIELDS['max_abs_err']})")
    value, line = measured
    found = _RANGE.fullmatch(value)
    bounds = found and ErrorRange(float(found["low"]), float(found["high"]), float(found["margin"]))
    if not bounds or not (0 < bounds.low <= bounds.high and bounds.margin >= 1):
        raise KnownFailuresError(f"{path}:{line}: entry {entry.id}: field 'max_abs_err' is '{value}'; "
                                 f"expected {SIGNATURE_FIELDS['max_abs_err']}")
    return dict(failure_classes=classes, max_abs_err=bounds)


def _retired(path: Path, raw: _RawEntry) -> Retired | None:
    """The tombstone of an entry retired into others, or None for a live entry."""
    if RETIRED_FIELD not in raw.fields:
        return None
    others = [name for name in raw.fields if name != RETIRED_FIELD]
    if others:
        raise KnownFailuresError(f"{path}:{raw.fields[others[0]][1]}: entry {raw.id}: field '{others[0]}': a retired "
                                 f"entry takes no other field ({RETIRED_FIELD}: {RETIRED_WHY})")
    value, _ = raw.fields[RETIRED_FIELD]
    return Retired(raw.id, _comma_list(value), f"{path}:{raw.line}")


def _check_retired(path: Path, retired: list[Retired], live: dict[str, KnownFailure]) -> None:
    for tombstone in retired:
        missing = [target for target in tombstone.into if target not in live]
        if missing or len(tombstone.into) < 2:
            what = f"'{missing[0]}' is no live entry" if missing else "names fewer than two entries"
            raise KnownFailuresError(f"{tombstone.source}: entry {tombstone.id}: field '{RETIRED_FIELD}' {what}; "
                                     f"expected {RETIRED_WHY}")


def check_against_findings(entries: list[KnownFailure], findings: dict[str, Finding], whole: bool) -> None:
    """Hold each entry to the packet of its bug (findings/<slug>/finding.yaml, which lists its entries):
    'new: <finding>' names a packet that says new; a packet's entry cites one of the packet's tracking
    threads; an entry of a bug whose root cause lives in another project says which and where it is
    fixed, as the packet does, and covers no sglang release the fix is in. ``whole``: the ledger is the
    repository's, so every entry a packet names must be in it."""
    by_id = {entry.id: entry for entry in entries}
    packet_of = {kf: slug for slug, finding in findings.items() for kf in finding.known_failures}
    for entry in entries:
        where = f"{entry.source}: entry {entry.id}"
        if entry.new_finding:
            finding = findings.get(entry.new_finding)
            if finding is None:
                raise KnownFailuresError(f"{where}: field 'upstream' names findings/{entry.new_finding}/, which does "
                                         f"not exist (packets: {', '.join(findings)})")
            if finding.status != "new":
                raise KnownFailuresError(f"{where}: field 'upstream': findings/{entry.new_finding} is {finding.status}; "
                                         f"cite its thread ({', '.join(tracking_threads(finding))})")
        slug = packet_of.get(entry.id)
        if slug is None:
            continue
        finding = findings[slug]
        if finding.status == "new" and entry.new_finding != slug:
            raise KnownFailuresError(f"{where}: field 'upstream' is '{entry.upstream}'; findings/{slug}, its packet, "
                                     f"says no thread tracks it: 'new: {slug}'")
        if finding.status != "new" and entry.thread not in tracking_threads(finding):
            raise KnownFailuresError(f"{where}: field 'upstream' is '{entry.upstream}'; findings/{slug}, its packet, "
                                     f"is tracked by {', '.join(tracking_threads(finding))}")
        if finding.root_cause != "sglang":
            expected = RootCause(finding.root_cause, fixed_release(finding))
            if entry.root_cause is None or (entry.root_cause.project, entry.root_cause.fixed_in) != (
                    expected.project, expected.fixed_in):
                raise KnownFailuresError(f"{where}: field 'root_cause' is "
                                         f"'{entry.root_cause or 'missing'}'; findings/{slug} puts the cause in "
                                         f"{finding.root_cause}: '{expected}'")
    for entry in entries:
        cause = entry.root_cause
        if cause and cause.vendored:
            covered = [r for r in KNOWN_RELEASES if version_key(r) >= version_key(cause.fixed_in) and entry.in_release(r)]
            if covered:
                raise KnownFailuresError(f"{entry.source}: entry {entry.id}: field 'releases' covers {covered[0]}, where "
                                         f"field 'root_cause' says sglang {cause.fixed_in} fixed it")
    if whole:
        for kf, slug in packet_of.items():
            if kf not in by_id:
                raise KnownFailuresError(f"findings/{slug}/finding.yaml: field 'known_failures' names {kf}, which "
                                         f"{entries[0].source.rsplit(':', 1)[0] if entries else 'the ledger'} does not have")


def load_known_failures(path: str | Path, findings: dict[str, Finding] | None = None) -> list[KnownFailure]:
    """Parse the ledger; raise KnownFailuresError on the first malformed entry. Zero entries is fine.

    Entries are held to the packets under findings/ (``findings``, default the repository's);
    retired entries are checked and left out of the result."""
    path = Path(path)
    entries: list[KnownFailure] = []
    retired: list[Retired] = []
    seen: dict[str, str] = {}
    for raw in _split_entries(path, path.read_text(encoding="utf-8")):
        if raw.id in seen:
            raise KnownFailuresError(
                f"{path}:{raw.line}: entry {raw.id} is defined twice (first at {seen[raw.id]}); ids must be unique"
            )
        seen[raw.id] = f"{path}:{raw.line}"
        tombstone = _retired(path, raw)
        if tombstone:
            retired.append(tombstone)
            continue
        entries.append(_build(path, raw))
    _check_retired(path, retired, {entry.id: entry for entry in entries})
    if findings is None:
        try:
            findings = load_all()
        except FindingError as error:
            raise KnownFailuresError(str(error)) from None
    check_against_findings(entries, findings, whole=path.resolve() == KNOWN_FAILURES_FILE.resolve())
    return entries


def standing(entries: list[KnownFailure], applied_fix: str | None) -> list[KnownFailure]:
    """The entries that hold for a run: those the applied fixes (``applied_fix``, one or several
    comma-separated) fix stand aside, so their cells run as plain cells (a fix that works turns them green;
    one that does not leaves them red)."""
    fixes = set(requested_fixes(applied_fix))
    return [entry for entry in entries if entry.fixed_by not in fixes]


def match(entries: Iterable[KnownFailure], cell: Mapping, release: str | None = None) -> KnownFailure | None:
    """The first entry (file order) whose scope contains the cell on ``release`` (default: installed), or None."""
    return next((entry for entry in entries if entry.matches(cell, release)), None)


def left_out_known(entries: Iterable[KnownFailure], left_out_cells: Iterable[Mapping],
                   release: str | None = None) -> list[str]:
    """The entries that select a cell the run left out of collection (the matrix holds it; the installed
    release or this machine never runs it): they cannot be judged stale here."""
    cells = list(left_out_cells)
    return sorted(entry.id for entry in entries if any(entry.matches(cell, release) for cell in cells))


def stale(entries: Iterable[KnownFailure], cells: Iterable[Mapping], release: str | None = None,
          unjudged_runners: Iterable[str] = (), left_out_known: Iterable[str] = ()) -> list[KnownFailure]:
    """Entries that select none of ``cells``, the cells of a run of the whole matrix (collected, whatever
    became of them): fixed and removed, renamed, or mistyped. An entry whose cells were collected and
    skipped here (a GPU entry on a CPU) is not stale: this machine cannot judge it, nor an entry whose
    failure only a GPU's detector sees (KnownFailure.judgeable_here) on a CPU. Nor is an entry for
    other releases than the run's (``release``, default the installed one), one for generated cases alone
    in a run without a generated tier, or one for hand-made cases in a run of the generated tier alone.
    Nor is an entry for runner forms the run left out for its machine alone (``unjudged_runners``: the
    CPU stand-in on a GPU), nor one that selects cells the run left out of collection (``left_out_known``:
    left_out_known's ids, e.g. cells of a backend limit on an older release). A run of a part of the matrix
    judges no entry (harness/base/results.py partial_because).

    Takes the cells rather than their ids because an entry selects on backend, mode and runner,
    which an id does not spell out reliably.
    """
    cells, unjudged, present = list(cells), set(unjudged_runners), set(left_out_known)
    drawn = [cell["case"].startswith(GENERATED_CASES) for cell in cells]
    generated_run, hand_run = any(drawn), not all(drawn)
    return [entry for entry in entries
            if entry.in_release(release) and entry.judgeable_here()
            and (generated_run if entry.selects_generated_only else hand_run)
            and not unjudged.issuperset(entry.runner) and entry.id not in present
            and not any(entry.matches(cell, release) for cell in cells)]
