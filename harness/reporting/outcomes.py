"""Same cells, same outcomes: two runs' (cell id, status, reason) compared cell by cell.

A change made for speed (skips decided at collection, cells spread over several GPUs, reused
backends) must not change what any cell says. `python -m harness.reporting same-outcomes A B`
is that check, over results.json files or run folders (out/cells/<run>/); the benchmark
applies it to its own runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from harness.reporting.cell_schema import load_results
from harness.reporting.merge import merge_runs

LIST_LIMIT = 50


def outcomes(cells: Iterable[Mapping]) -> dict[str, tuple[str, str | None]]:
    return {cell["cell_id"]: (cell["status"], cell["reason"]) for cell in cells}


def load_cells(path: Path) -> list[dict]:
    """The cells of a results.json, or of a run folder (merged as `merge` would)."""
    return merge_runs([path]).results["cells"] if Path(path).is_dir() else load_results(path)["cells"]


def differences(before: Mapping[str, tuple], after: Mapping[str, tuple]) -> list[str]:
    """One line per cell whose outcome differs, or that only one side has; [] when identical."""
    lines = []
    for cell_id in sorted(before.keys() | after.keys()):
        old, new = before.get(cell_id), after.get(cell_id)
        if old != new:
            lines.append(f"{cell_id}: {_describe(old)} -> {_describe(new)}")
    return lines


def _describe(outcome: tuple | None) -> str:
    if outcome is None:
        return "absent"
    status, reason = outcome
    return f"{status} ({reason})" if reason else status


def report(before_path: Path, after_path: Path) -> tuple[bool, str]:
    """(identical?, the text to print)."""
    before, after = outcomes(load_cells(before_path)), outcomes(load_cells(after_path))
    found = differences(before, after)
    if not found:
        return True, f"{len(after)} cells, each with the same (status, reason) in {before_path} and {after_path}\n"
    shown = found[:LIST_LIMIT] + ([f"... and {len(found) - LIST_LIMIT} more"] if len(found) > LIST_LIMIT else [])
    return False, (f"{len(found)} of {len(before.keys() | after.keys())} cells differ between {before_path} "
                   f"and {after_path}:\n" + "".join(f"  {line}\n" for line in shown))
