"""The cell record contract: one JSON object per collected test cell.

The pytest plugin writes these lines; every report reads them back through `validate_cell`, so a
record that breaks the contract is reported once, with its file and line, instead of surfacing
later as a KeyError deep inside a chart. Only the vocabularies the reports give meaning to
(status, runner, padding) are enforced; backend and mode names belong to their registries, so a
new backend shows up in the reports without a change here.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.ledger.failure_class import FAILURE_CLASSES
from harness.modes import MODES
from harness.runners import GRAPH_RUNNER_NAMES as GRAPH_RUNNERS
from harness.runners import RUNNER_NAMES as RUNNERS

STATUSES = ("passed", "failed", "crashed", "skipped", "xfailed", "xpassed", "not_run")
# not_run: collected but never executed (worker pool exhausted, session interrupted, process
# killed); its reason says which. Unlike skipped, it fails the run.
EXECUTED = frozenset(STATUSES) - {"skipped", "not_run"}
# Outcomes of executed cells that make the run fail: a real failure, or a known failure that got fixed.
UNEXPECTED = frozenset({"failed", "crashed", "xpassed"})
PADDINGS = ("prod_fill", "small_real")
DRAFT_SHAPES = ("chain", "tree")  # harness/base/case_spec.py: CaseSpec.draft_shape
# Display order only (reports put the verify path first); unknown modes sort after these.
MODE_ORDER = tuple(MODES)


class ReportingError(ValueError):
    """Input that the reports cannot use; the message names the file and what to fix."""


@dataclass(frozen=True)
class _Field:
    types: tuple[type, ...]
    nullable: bool = False
    choices: tuple[str, ...] | None = None


_TEXT = (str,)
_NUMBER = (int, float)
_ERROR_METRIC = _Field(_NUMBER, nullable=True)

CELL_FIELDS: dict[str, _Field] = {
    "cell_id": _Field(_TEXT),
    "case": _Field(_TEXT),
    "backend": _Field(_TEXT),
    "mode": _Field(_TEXT),
    "draft_shape": _Field(_TEXT, choices=DRAFT_SHAPES),
    "host_mirrors": _Field(_TEXT),  # the case field's value: full, gpu_only, none (harness/case/cases.py)
    "runner": _Field(_TEXT, choices=RUNNERS),
    "padding": _Field(_TEXT, nullable=True, choices=PADDINGS),
    "capture_bs": _Field((int,), nullable=True),
    "status": _Field(_TEXT, choices=STATUSES),
    "reason": _Field(_TEXT, nullable=True),
    "known_failure": _Field(_TEXT, nullable=True),
    "max_abs_err": _ERROR_METRIC,
    "max_rel_err": _ERROR_METRIC,
    "mismatch_frac": _ERROR_METRIC,
    "tolerance": _Field((dict,), nullable=True),
    "wall_s": _Field(_NUMBER, nullable=True),
    "nodeid": _Field(_TEXT),
    "rerun": _Field(_TEXT),
}
# Added after the run by crash attribution (harness/ledger/lone_run.py) and sanitizer re-runs
# (harness/ledger/sanitizer.py), or by the worker for an executed cell (phase_s, failure_class); absent
# from records that predate them.
OPTIONAL_FIELDS: dict[str, _Field] = {
    # how a failed, crashed or xfailed cell failed (harness/ledger/failure_class.py); null for the others
    "failure_class": _Field(_TEXT, nullable=True, choices=tuple(FAILURE_CLASSES)),
    "reproduced_alone": _Field((bool,), nullable=True),  # did the crash happen again in a fresh process?
    "lone_run": _Field(_TEXT, nullable=True),  # what that lone run said
    "sanitizer": _Field((dict,), nullable=True),  # tool -> its first error block (or why none)
    "phase_s": _Field((dict,), nullable=True),  # wall seconds per phase (harness/base/results.py)
    "traits": _Field((list,), nullable=True),  # the case's traits (harness/case/case_traits.py)
}
TOLERANCE_KEYS = ("atol", "rtol")
# Fields that only mean something for CUDA-graph replay.
GRAPH_ONLY_FIELDS = ("padding", "capture_bs")


def _field_problem(name: str, value: Any, spec: _Field) -> str | None:
    """Say what is wrong with one field value, or None when it is valid."""
    if value is None:
        return None if spec.nullable else "is null; it is required"
    # bool is an int to Python, never to this contract (unless the field is a bool).
    if (isinstance(value, bool) and bool not in spec.types) or not isinstance(value, spec.types):
        wanted = " or ".join(t.__name__ for t in spec.types) + (" or null" if spec.nullable else "")
        return f"is {value!r} ({type(value).__name__}); expected {wanted}"
    if spec.choices is not None and value not in spec.choices:
        valid = ", ".join(spec.choices) + (", null" if spec.nullable else "")
        return f"is {value!r}; valid: {valid}"
    if name == "tolerance" and (
        sorted(value) != sorted(TOLERANCE_KEYS)
        or not all(isinstance(value[k], _NUMBER) and not isinstance(value[k], bool) for k in value)
    ):
        return f"is {value!r}; expected {{'atol': <number>, 'rtol': <number>}} or null"
    if name == "sanitizer" and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return f"is {value!r}; expected {{'<tool>': '<first error>', ...}} or null"
    if isinstance(value, str) and spec.choices is None and not value and not spec.nullable:
        return "is empty"
    return None


def _upgrade_variant(cell: dict) -> None:
    """Records written before 2026-11-23 carry 'variant' ('tree', 'chain+gpu_only', ...), one string for
    two facts; split it in place, so old runs still merge and compare with new ones."""
    if "variant" in cell and "draft_shape" not in cell and isinstance(cell["variant"], str):
        shape, _, mirrors = cell.pop("variant").partition("+")
        cell["draft_shape"], cell["host_mirrors"] = shape, mirrors or "full"


def validate_cell(cell: Any, where: str) -> dict:
    """Return `cell` if it follows the contract, else raise naming `where` and the field.

    Extra keys are kept: the plugin may record more than the reports read.
    """
    if not isinstance(cell, dict):
        raise ReportingError(f"{where}: expected a JSON object, got {type(cell).__name__}")
    _upgrade_variant(cell)
    label = f"{where}: cell {cell.get('cell_id')!r}"
    missing = [name for name in CELL_FIELDS if name not in cell]
    if missing:
        raise ReportingError(f"{label}: missing field(s) {', '.join(missing)}")
    present = {**CELL_FIELDS, **{k: v for k, v in OPTIONAL_FIELDS.items() if k in cell}}
    for name, spec in present.items():
        problem = _field_problem(name, cell[name], spec)
        if problem:
            raise ReportingError(f"{label}: field '{name}' {problem}")
    if cell["runner"] not in GRAPH_RUNNERS:
        for name in GRAPH_ONLY_FIELDS:
            if cell[name] is not None:
                raise ReportingError(
                    f"{label}: field '{name}' is {cell[name]!r} but runner is "
                    f"{cell['runner']!r}; it must be null unless runner is one of {', '.join(GRAPH_RUNNERS)}"
                )
    return cell


def read_cell_lines(path: Path) -> list[tuple[dict, str]]:
    """Parse one worker's JSON-lines file into (cell, "file:line") pairs; blank lines are skipped."""
    cells = []
    with open(path, encoding="utf-8", errors="surrogateescape") as lines:  # bad bytes: a JSON error, not a traceback
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ReportingError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
            cells.append((validate_cell(record, where), where))
    return cells


def load_results(path: Path) -> dict:
    """Read results.json (written by `merge`; recorded gzip-compressed as results.json.gz by
    `python -m harness record`) and check it before any report trusts it."""
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
        raise ReportingError(f"{path}: not a gzip file ({err}); record it again with python -m harness record") from None
    text = raw.decode("utf-8", errors="surrogateescape")
    try:
        results = json.loads(text)
    except json.JSONDecodeError as err:
        problem = "is empty" if not text.strip() else f"is not valid JSON ({err.msg} at line {err.lineno})"
        raise ReportingError(f"{path}: {problem}; write it again with merge") from None
    if not (isinstance(results, dict) and isinstance(results.get("runs"), list)
            and isinstance(results.get("cells"), list)):
        raise ReportingError(f"{path}: expected {{'runs': [...], 'cells': [...]}} as written by merge")
    if not results["cells"]:
        raise ReportingError(f"{path}: holds no cells; merge never writes such a file, so it was cut or edited")
    for index, run in enumerate(results["runs"]):
        if not isinstance(run, dict) or not isinstance(run.get("versions", {}), dict):
            raise ReportingError(f"{path}: runs[{index}] is not a run record (an object with run_id, "
                                 "device, versions {...}) as merge copies from run.json")
    for index, cell in enumerate(results["cells"]):
        validate_cell(cell, f"{path}: cells[{index}]")
    return results


def outcome_message(cell: Mapping) -> str:
    """The one-line message a reader sees for a cell's outcome, shared by JUnit and the digests."""
    status, known = cell["status"], cell.get("known_failure")
    if status == "xfailed":
        return f"known failure: {known}"
    if status == "xpassed":
        return f"UNEXPECTEDLY PASSED, drop KNOWN_FAILURES entry {known}"
    if status == "not_run":
        return f"not run: {cell.get('reason') or 'no reason recorded'}"
    return cell.get("reason") or status


def diagnosis_lines(cell: Mapping) -> list[str]:
    """What re-runs found out about a crashed or failed cell, one line each (JUnit, SUMMARY.md)."""
    lines = []
    if cell.get("lone_run") is not None:
        verdict = {True: "reproduced alone", False: "did NOT reproduce alone",
                   None: "not confirmed alone"}[cell.get("reproduced_alone")]
        lines.append(f"{verdict}: {cell['lone_run']}")
    for tool, finding in (cell.get("sanitizer") or {}).items():
        lines.append(f"{tool}: {finding}")
    return lines
