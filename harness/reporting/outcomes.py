"""Same cells, same outcomes: two runs' (cell id, status, reason) compared cell by cell.

A change made for speed (skips decided at collection, cells spread over several GPUs, reused
backends, the reference moved to the GPU) must not change what any cell says. `python -m
harness.reporting same-outcomes A B` is that check, over results.json files or run folders
(out/cells/<run>/); the benchmark applies it to its own runs. `--errors-within TOL` also
holds every cell that passed in both runs to the same max_abs_err within TOL: the check that a
change to the reference's arithmetic moved no figure, not only no verdict.
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


def error_drift(before: Iterable[Mapping], after: Iterable[Mapping], within: float) -> tuple[int, list[str]]:
    """(cells passed in both runs, one line per such cell whose max_abs_err moved by more than ``within``)."""
    passed_before = {cell["cell_id"]: cell["max_abs_err"] for cell in before if cell["status"] == "passed"}
    both, lines = 0, []
    for cell in after:
        old = passed_before.get(cell["cell_id"])
        if cell["status"] != "passed" or old is None:
            continue
        both += 1
        if not abs(cell["max_abs_err"] - old) <= within:
            lines.append(f"{cell['cell_id']}: max_abs_err {old!r} -> {cell['max_abs_err']!r}")
    return both, lines


def _listed(lines: list[str]) -> str:
    shown = lines[:LIST_LIMIT] + ([f"... and {len(lines) - LIST_LIMIT} more"] if len(lines) > LIST_LIMIT else [])
    return "".join(f"  {line}\n" for line in shown)


def report(before_path: Path, after_path: Path, errors_within: float | None = None) -> tuple[bool, str]:
    """(identical?, the text to print)."""
    before_cells, after_cells = load_cells(before_path), load_cells(after_path)
    before, after = outcomes(before_cells), outcomes(after_cells)
    found = differences(before, after)
    if found:
        return False, (f"{len(found)} of {len(before.keys() | after.keys())} cells differ between {before_path} "
                       f"and {after_path}:\n" + _listed(found))
    text = f"{len(after)} cells, each with the same (status, reason) in {before_path} and {after_path}\n"
    if errors_within is None:
        return True, text
    both, drifted = error_drift(before_cells, after_cells, errors_within)
    if drifted:
        return False, text + f"{len(drifted)} of {both} cells passed in both moved max_abs_err by more than " \
                             f"{errors_within:g}:\n" + _listed(drifted)
    return True, text + f"all {both} cells passed in both have the same max_abs_err within {errors_within:g}\n"
