"""Where runs write, and the run folder, out/cells/<run_id>/: what a run collected and what became of each cell.

Every command writes under OUTPUT_DIR unless the user names a path, so running never dirties
the checkout. The results the README and docs show live under RECORDED_DIR (tracked) and change
only through `python -m harness record` (harness/session/record.py), which copies a run's outputs there.

Files, each written as soon as its facts are known so that a crash loses nothing:
- `collected.json`: the cells the run collected, written by the controller before any runs;
  every one of them must end with a record (a cell without one is reported as not run).
- `<worker>.jsonl`: one result line per cell, appended by the process that ran it (or by the
  controller for a cell whose process died, or that never ran).
- `notes-<name>.json`: fields added to cells' records after the run (crash attribution,
  sanitizer findings), keyed by cell id; merge folds them into results.json.
- `run.json`: the run's facts (device, versions, command, wall time, and what it selected).
harness/reporting reads them back.

Phase timings (``phase_s`` in a record) say where a cell's time goes: wall seconds per phase,
in the order a cell runs them. ``imports`` is what sglang costs the first cell a
worker runs (later cells find the modules loaded); the others are paid by every cell. What the
phases leave out of the cell's pytest wall time is pytest's own per-cell work.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import time
from pathlib import Path
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Iterator

from harness import ROOT
from harness.base import platform

OUTPUT_DIR = ROOT / "out"  # git-ignored: everything a command writes unless the user names a path
RECORDED_DIR = ROOT / "reports"  # tracked: recorded results, written only by `python -m harness record`
CELLS_DIR = OUTPUT_DIR / "cells"  # one run folder per run id
SECTION = "gpu" if platform.HAS_GPU else "cpu"  # this machine's section: out/<section>/, reports/<section>/
RUN_ID_ENV = "ATTN_HARNESS_RUN_ID"
MANIFEST = "collected.json"
NOTES_GLOB = "notes-*.json"
RECORDS_GLOB = "*.jsonl"
MEASURES = ("max_abs_err", "max_rel_err", "mismatch_frac", "tolerance")


def run_id() -> str:
    """Shared by the controller and its workers (the controller sets it first)."""
    if RUN_ID_ENV not in os.environ:
        os.environ[RUN_ID_ENV] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    return os.environ[RUN_ID_ENV]


def run_folder(run: str) -> Path:
    """The folder of the run with this id (created by the run itself, not here)."""
    return CELLS_DIR / run


def run_dir() -> Path:
    """This run's folder, created on first use."""
    path = run_folder(run_id())
    path.mkdir(parents=True, exist_ok=True)
    return path


def cell_record(identity: dict, status: str, reason: str | None, *, wall_s: float | None = None,
                known_failure: str | None = None, measures: dict | None = None) -> dict:
    """One result line (harness/reporting/cell_schema.py).

    `identity` is what names the cell: its record keys (harness/cells.py), nodeid and rerun.
    """
    return {**identity, "status": status, "reason": reason, "known_failure": known_failure,
            **dict.fromkeys(MEASURES), **(measures or {}), "wall_s": wall_s}


def append_record(record: dict, worker: str) -> None:
    """Add one result line to the worker's file as soon as the cell ends. Closing the file hands the
    line to the kernel, so a worker that crashes later loses nothing written; no fsync, which guards
    only against the machine going down, at the cost of a disk flush per cell."""
    with open(run_dir() / f"{worker}.jsonl", "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def read_records(folder: Path) -> dict[str, dict]:
    """The last result line of each cell in a run folder (worker files in name order).

    Lenient on purpose, for the processes that account for cells while a run ends: a line cut
    short by a dying process is not a record. merge, which validates, names such a line.
    """
    found = {}
    for path in sorted(folder.glob(RECORDS_GLOB)):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
                found[record["cell_id"]] = record
            except (ValueError, KeyError, TypeError):
                continue
    return found


def write_manifest(identities: list[dict]) -> Path:
    path = run_dir() / MANIFEST
    path.write_text(json.dumps({"cells": identities}, indent=1) + "\n", encoding="utf-8")
    return path


def write_notes(name: str, notes: dict[str, dict]) -> Path:
    """Fields to add to cells' records, e.g. {"<cell id>": {"reproduced_alone": True}}."""
    path = run_dir() / NOTES_GLOB.replace("*", name)
    path.write_text(json.dumps(notes, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def write_run_info(info: dict) -> Path:
    path = run_dir() / "run.json"
    path.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return path


def selection(keyword: str, markexpr: str, deselect, cases_dir: str, default_cases_dir: Path,
              generated_only: bool, shard: tuple[int, int]) -> dict:
    """What a run selected of the matrix, as run.json keeps it: the options that narrow it."""
    own = Path(cases_dir).resolve() != default_cases_dir.resolve()
    return {"keyword": keyword or None, "markexpr": markexpr or None, "deselect": list(deselect or []) or None,
            "cases_dir": cases_dir if own else None, "generated_only": generated_only,
            "shard": f"{shard[0]}/{shard[1]}"}


def narrowed_by(chosen: dict | None) -> str | None:
    """The options with which a run selected a part of the matrix (its shard aside), or None for all of it.
    A run.json without a selection predates it and counts as the whole matrix."""
    if not chosen:
        return None
    parts = [f"-k {chosen['keyword']!r}" if chosen.get("keyword") else "",
             f"-m {chosen['markexpr']!r}" if chosen.get("markexpr") else "",
             f"--deselect ({len(chosen['deselect'])})" if chosen.get("deselect") else "",
             f"--cases-dir {chosen['cases_dir']}" if chosen.get("cases_dir") else "",
             "--generated-only" if chosen.get("generated_only") else ""]
    return " ".join(part for part in parts if part) or None


LEFT_OUT_HERE = "the CPU stand-in on a GPU"  # the one left-out kind another machine runs (harness/cell/cell_matrix.py)


def left_out_records(dropped: Counter) -> list[dict]:
    """run.json's ``left_out``: one record per (kind, why, backend, runner) with its cell count."""
    return [{"kind": kind, "why": why, "backend": backend, "runner": runner, "cells": count}
            for (kind, why, backend, runner), count in dropped.most_common()]


def runners_left_out_here(records: Iterable[Mapping]) -> set[str]:
    """The runner forms a run left out for its machine alone (the CPU stand-in on a GPU): a known failure
    for one of them cannot be judged stale by that run."""
    return {record["runner"] for record in records if record["kind"] == LEFT_OUT_HERE}


def partial_because(runs: list[dict]) -> str | None:
    """Why a results.json's runs together are not the whole matrix, or None when they are: one of them
    selected a part of it, or their shards leave some out."""
    for run in runs:
        narrowed = narrowed_by(run.get("selection"))
        if narrowed:
            return f"run {run.get('run_id', '?')} selected {narrowed}"
    shards = {tuple(map(int, run["selection"]["shard"].split("/"))) for run in runs if run.get("selection")}
    counts = {n for _, n in shards}
    if shards and (len(counts) > 1 or {i for i, _ in shards} != set(range(1, max(counts) + 1))):
        return f"its runs hold shards {', '.join(f'{i}/{n}' for i, n in sorted(shards))} of the matrix"
    return None


PHASES = (
    "imports",  # sglang's modules, once per worker process
    "layout_pools",  # KV layout, ReqToTokenPool / MHATokenToKVPool filled and poisoned, server args
    "backend",  # model-runner stand-in and sglang's backend object
    "inputs_reference",  # the ForwardBatch, each step's Q/K/V and the float64 reference
    "capture",  # graph forms: init_cuda_graph_state, guards, capture-time metadata, warm-ups, capture
    "replay",  # graph forms: per replayed batch, inputs copied in, replay metadata, the forwards
    "eager",  # init_forward_metadata and the forwards, eagerly
    "invariance",  # batch_invariance cases: the cut batches' metadata and forwards, eagerly
    "compare",  # outputs against the reference (and replay against eager)
)


class PhaseClock:
    """Accumulates wall seconds per phase; a phase may be entered more than once."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def rounded(self) -> dict[str, float]:
        return {name: round(seconds, 4) for name, seconds in self.seconds.items()}
