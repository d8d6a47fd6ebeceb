"""Merge the per-worker cell lines of one or more runs into reports/results.json.

A night is several `--shard i/n` runs, each with several xdist workers writing their own
`<worker>.jsonl`; results.json is the single file every other report reads. A cell that appears
twice (a shard re-run after a crash) keeps its last record, and the merge says so instead of
silently picking one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.reporting.cell_schema import ReportingError, read_cell_lines

RUN_RECORD = "run.json"


@dataclass(frozen=True)
class Merged:
    results: dict  # {"runs": [run.json, ...], "cells": [cell, ...sorted by cell_id]}
    warnings: list[str]


def _read_run_record(run_dir: Path, warnings: list[str]) -> dict:
    path = run_dir / RUN_RECORD
    if not path.exists():
        # The run died before writing it; its cell lines are still worth reporting.
        warnings.append(f"{path}: missing (the run did not finish?); its cells are merged without run facts")
        return {"run_id": run_dir.name}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportingError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(record, dict):
        raise ReportingError(f"{path}: expected a JSON object with run_id, device, versions, ...")
    return record


def merge_runs(run_dirs: Sequence[Path]) -> Merged:
    """Read every run folder in the order given; within a folder, worker files in name order.

    "Last wins" follows that order, so list a re-run after the run it repairs.
    """
    warnings: list[str] = []
    runs: list[dict] = []
    cells: dict[str, tuple[dict, str]] = {}
    for run_dir in map(Path, run_dirs):
        if not run_dir.is_dir():
            raise ReportingError(f"{run_dir}: not a run folder (expected reports/cells/<run_id>/)")
        runs.append(_read_run_record(run_dir, warnings))
        worker_files = sorted(run_dir.glob("*.jsonl"))
        if not worker_files:
            warnings.append(f"{run_dir}: no *.jsonl cell files")
        for worker_file in worker_files:
            for cell, where in read_cell_lines(worker_file):
                earlier = cells.get(cell["cell_id"])
                if earlier:
                    warnings.append(f"cell {cell['cell_id']}: {where} replaces {earlier[1]}")
                cells[cell["cell_id"]] = (cell, where)
    if not cells:
        raise ReportingError(f"no cell lines found in {', '.join(map(str, run_dirs))}")
    return Merged(
        results={"runs": runs, "cells": [cells[cell_id][0] for cell_id in sorted(cells)]},
        warnings=warnings,
    )


def write_results(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
