"""The known-failures ledger: KNOWN_FAILURES.md, readable Markdown that is also strict data.

Each entry selects cells (backend, mode, runner, cases) and must cite where the bug is tracked
upstream. The runner turns a matching cell into a strict xfail, so a fixed bug surfaces as an
unexpected pass instead of hiding behind a skip, and the reports list entries that matched no
executed cell (stale). A typo here must fail loudly, never silently widen or empty a selection,
hence the strict parser.

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

from harness.runners import RUNNER_NAMES as RUNNERS

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
    "upstream": "the tracking issue: a URL or owner/repo#N or repo#N, e.g. sglang#12345",
}
OPTIONAL_FIELDS = {
    "evidence": "where the failure was seen: a report path, a CI link, numbers",
}
FIELDS = {**SELECTOR_FIELDS, **TEXT_FIELDS, **OPTIONAL_FIELDS}
REQUIRED_FIELDS = tuple(SELECTOR_FIELDS) + tuple(TEXT_FIELDS)

_ID = re.compile(r"KF-[a-z0-9]+(?:-[a-z0-9]+)*")
_FIELD_LINE = re.compile(r"- ([A-Za-z_]+):(.*)")
_UPSTREAM = re.compile(r"https?://\S+|[\w.-]+(?:/[\w.-]+)?#\d+")
_FENCE = re.compile(r"\s*(```|~~~)")


class KnownFailuresError(ValueError):
    """KNOWN_FAILURES.md is malformed; the message names the line, the entry and the field."""


@dataclass(frozen=True)
class KnownFailure:
    id: str
    backend: tuple[str, ...]
    mode: tuple[str, ...]
    runner: tuple[str, ...]
    cases: tuple[str, ...]
    reason: str
    upstream: str
    evidence: str | None
    source: str  # "KNOWN_FAILURES.md:12", the entry's heading

    def matches(self, cell: Mapping) -> bool:
        """True when the cell (needs cell_id, case, backend, mode, runner) is in this entry's scope."""
        return (
            _any_match(self.backend, cell["backend"])
            and _any_match(self.mode, cell["mode"])
            and _any_match(self.runner, cell["runner"])
            and (_any_match(self.cases, cell["cell_id"]) or _any_match(self.cases, cell["case"]))
        )


def _any_match(globs: tuple[str, ...], value: str) -> bool:
    return any(fnmatchcase(value, glob) for glob in globs)


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


def _selector(path: Path, entry: _RawEntry, name: str) -> tuple[str, ...]:
    value, line = entry.fields[name]
    globs = tuple(part.strip().strip("`").strip() for part in value.split(","))
    where = f"{path}:{line}: entry {entry.id}: field '{name}'"
    if not all(globs):
        raise KnownFailuresError(f"{where}: '{value}' has an empty item; expected {SELECTOR_FIELDS[name]}")
    if name == "runner":
        for glob in globs:
            if not any(fnmatchcase(runner, glob) for runner in RUNNERS):
                raise KnownFailuresError(f"{where}: '{glob}' matches no runner; expected {SELECTOR_FIELDS[name]}")
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
    if not _UPSTREAM.fullmatch(upstream):
        raise KnownFailuresError(
            f"{path}:{line}: entry {entry.id}: field 'upstream' is '{upstream}'; expected {TEXT_FIELDS['upstream']}"
        )
    evidence = entry.fields.get("evidence")
    return KnownFailure(
        id=entry.id,
        **{name: _selector(path, entry, name) for name in SELECTOR_FIELDS},
        reason=entry.fields["reason"][0],
        upstream=upstream,
        evidence=evidence[0] if evidence else None,
        source=f"{path}:{entry.line}",
    )


def load_known_failures(path: str | Path) -> list[KnownFailure]:
    """Parse the ledger; raise KnownFailuresError on the first malformed entry. Zero entries is fine."""
    path = Path(path)
    entries: list[KnownFailure] = []
    seen: dict[str, str] = {}
    for raw in _split_entries(path, path.read_text(encoding="utf-8")):
        if raw.id in seen:
            raise KnownFailuresError(
                f"{path}:{raw.line}: entry {raw.id} is defined twice (first at {seen[raw.id]}); ids must be unique"
            )
        entry = _build(path, raw)
        seen[entry.id] = entry.source
        entries.append(entry)
    return entries


def match(entries: Iterable[KnownFailure], cell: Mapping) -> KnownFailure | None:
    """The first entry (file order) whose scope contains the cell, or None."""
    return next((entry for entry in entries if entry.matches(cell)), None)


def stale(entries: Iterable[KnownFailure], executed_cells: Iterable[Mapping]) -> list[KnownFailure]:
    """Entries that match none of the executed cells: fixed, renamed, or mistyped.

    Takes the cells rather than their ids because an entry selects on backend, mode and runner,
    which an id does not spell out reliably.
    """
    cells = list(executed_cells)
    return [entry for entry in entries if not any(entry.matches(cell) for cell in cells)]
