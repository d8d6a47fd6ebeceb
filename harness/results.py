"""Per-cell result lines, written as each cell finishes so a crash loses nothing.

Each pytest process (controller or xdist worker) appends to its own JSONL file
under reports/cells/<run_id>/; harness/reporting merges them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

REPORTS_DIR = Path(__file__).resolve().parent.parent / "reports"
RUN_ID_ENV = "ATTN_HARNESS_RUN_ID"


def run_id() -> str:
    """Shared by the controller and its workers (the controller sets it first)."""
    if RUN_ID_ENV not in os.environ:
        os.environ[RUN_ID_ENV] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    return os.environ[RUN_ID_ENV]


def run_dir(base: Path = REPORTS_DIR) -> Path:
    path = base / "cells" / run_id()
    path.mkdir(parents=True, exist_ok=True)
    return path


def append_record(record: dict, worker: str, base: Path = REPORTS_DIR) -> None:
    with open(run_dir(base) / f"{worker}.jsonl", "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_run_info(info: dict, base: Path = REPORTS_DIR) -> Path:
    path = run_dir(base) / "run.json"
    path.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return path
