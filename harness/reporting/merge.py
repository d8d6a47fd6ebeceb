"""Merge the per-worker cell lines of one or more runs into out/<section>/results.json.

A night is several `--shard i/n` runs, each with several xdist workers writing their own
`<worker>.jsonl`; results.json is the single file every other report reads. A cell that appears
twice (a shard re-run after a crash) keeps its last record, and the merge says so instead of
silently picking one. Every cell a run collected (its `collected.json`) ends in results.json: one
with no record anywhere becomes `not_run`, so a run that died part-way cannot shrink the totals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.reporting.cell_schema import ReportingError, read_cell_lines, validate_cell
from harness.base.results import MANIFEST, NOTES_GLOB, RECORDS_GLOB, cell_record

RUN_RECORD = "run.json"
UNRECORDED = ("no result was recorded: the session ended (killed, timed out, or its process died) "
              "before this cell reported")


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
    return _read_json(path, "a JSON object with run_id, device, versions, ...")


def _read_json(path: Path, expected: str) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportingError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(document, dict):
        raise ReportingError(f"{path}: expected {expected}")
    return document


def _collected(run_dir: Path) -> list[dict]:
    """The identities of the cells a run collected; [] for a folder that predates manifests."""
    path = run_dir / MANIFEST
    if not path.exists():
        return []
    cells = _read_json(path, "{'cells': [...]} as the pytest plugin writes it").get("cells")
    if not isinstance(cells, list) or not all(isinstance(c, dict) and "cell_id" in c for c in cells):
        raise ReportingError(f"{path}: expected {{'cells': [{{'cell_id': ..., ...}}, ...]}}")
    return cells


def _notes(run_dir: Path) -> list[tuple[Path, dict]]:
    """Fields added after the run (crash attribution, sanitizer), per notes file."""
    return [(path, _read_json(path, "{'<cell id>': {'<field>': <value>}}"))
            for path in sorted(run_dir.glob(NOTES_GLOB))]


def merge_runs(run_dirs: Sequence[Path]) -> Merged:
    """Read every run folder in the order given; within a folder, worker files in name order.

    "Last wins" follows that order, so list a re-run after the run it repairs.
    """
    warnings: list[str] = []
    runs: list[dict] = []
    cells: dict[str, tuple[dict, str]] = {}
    collected: dict[str, tuple[dict, Path]] = {}
    for run_dir in map(Path, run_dirs):
        if not run_dir.is_dir():
            raise ReportingError(f"{run_dir}: not a run folder (expected out/cells/<run_id>/)")
        runs.append(_read_run_record(run_dir, warnings))
        collected.update((identity["cell_id"], (identity, run_dir)) for identity in _collected(run_dir))
        worker_files = sorted(run_dir.glob(RECORDS_GLOB))
        if not worker_files:
            warnings.append(f"{run_dir}: no {RECORDS_GLOB} cell files")
        for worker_file in worker_files:
            for cell, where in read_cell_lines(worker_file):
                earlier = cells.get(cell["cell_id"])
                if earlier:
                    warnings.append(f"cell {cell['cell_id']}: {where} replaces {earlier[1]}")
                cells[cell["cell_id"]] = (cell, where)
        for path, notes in _notes(run_dir):
            for cell_id, fields in notes.items():
                if cell_id in cells and isinstance(fields, dict):
                    record, where = cells[cell_id]
                    cells[cell_id] = (validate_cell({**record, **fields}, f"{path}: {cell_id}"), where)
                else:
                    warnings.append(f"{path}: {cell_id}: no such recorded cell, or its fields are not a mapping")
    for cell_id, (identity, run_dir) in collected.items():
        if cell_id not in cells:
            where = str(run_dir / MANIFEST)
            cells[cell_id] = (validate_cell(cell_record(identity, "not_run", UNRECORDED), where), where)
    if not cells:
        raise ReportingError(f"no cell lines found in {', '.join(map(str, run_dirs))}")
    return Merged(
        results={"runs": runs, "cells": [cells[cell_id][0] for cell_id in sorted(cells)]},
        warnings=warnings,
    )


def write_results(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
