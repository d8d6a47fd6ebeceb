"""The per-backend table at the end of a run: a row per backend, skip reasons counted, and an
`all` row that adds up to the run's last line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from harness import ROOT
from harness.reporting.cell_schema import STATUSES
from harness.reporting.per_backend import per_backend_lines
from harness.reporting.test_reporting import CELLS, make_cell
from harness.base.results import RUN_ID_ENV, run_folder

pytestmark = pytest.mark.release_independent

SECTION_TITLE = "attn-harness cells per backend"
# Skipped at collection on a CPU machine (bf16 under Triton's interpreter, no GPU, no capture):
# 55 cells of all five backends that cost no sglang import there.
TINY_SELECTION = "draft_decode-chain-bs2-dtypebfloat16"


def _rows(lines: list[str]) -> dict[str, dict[str, int]]:
    """Table lines -> backend -> column -> count (skip reason lines left out)."""
    header = lines[0].split()
    return {row.split()[0]: dict(zip(header[1:], map(int, row.split()[1:])))
            for row in lines[1:] if not row.startswith(" ")}


def _last_line_counts(line: str) -> dict[str, int]:
    """'attn-harness: all 55 collected cells accounted for: 5 passed, 50 skipped' -> counts."""
    return {status: int(count) for count, status in re.findall(r"(\d+) (\w+)", line.partition("accounted for:")[2])}


def test_a_row_per_backend_with_every_status_present_and_the_skip_reasons_counted():
    cells = CELLS + [make_cell(backend="fa4", case=f"extra{i}", status="skipped", reason=f"reason {i}")
                     for i in range(4)]
    lines = per_backend_lines(cells)
    assert lines[0].split() == ["backend", "cells", "ran", *STATUSES]  # each status occurs in CELLS
    rows = _rows(lines)
    assert rows["fa3"] == dict(cells=2, ran=2, passed=0, failed=1, crashed=1, skipped=0, xfailed=0, xpassed=0,
                               not_run=0)
    assert rows["torch_native"]["not_run"] == 1 and rows["torch_native"]["ran"] == 0
    assert rows["all"]["cells"] == len(cells)
    assert all(rows["all"][column] == sum(row[column] for name, row in rows.items() if name != "all")
               for column in rows["all"])
    fa4 = lines[lines.index(next(line for line in lines if line.startswith("fa4"))) + 1:][:4]
    assert fa4 == ["  2 cells skipped: fa4 needs sm100", "  1 cell skipped: reason 0", "  1 cell skipped: reason 1",
                   "  2 cells skipped for 2 other reasons"]


def test_the_table_ends_a_real_run_and_adds_up_to_its_last_line():
    run = f"per-backend-{uuid.uuid4().hex[:8]}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, RUN_ID_ENV: run}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "harness/test_cases.py", "-q", "-p", "no:cacheprovider",
                               "-k", TINY_SELECTION], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(run_folder(run), ignore_errors=True)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    start = next(i for i, line in enumerate(lines) if SECTION_TITLE in line) + 1
    table = lines[start:next(i for i, line in enumerate(lines) if line.startswith("all ")) + 1]
    rows = _rows(table)
    # torch_native never drafts (sglang's DraftBackendFactory has no EAGLE decode for it): left out, said once
    assert set(rows) == {"fa3", "fa4", "flashinfer", "triton", "all"}
    assert any(line.startswith("left out ") and "torch_native" in line for line in lines), done.stdout[-3000:]
    expected = _last_line_counts(lines[-1])
    assert lines[-1].startswith(f"attn-harness: all {rows['all']['cells']} collected cells accounted for")
    assert {status: count for status, count in rows["all"].items() if status in STATUSES and count} == expected
    assert all(rows["all"][column] == sum(row[column] for name, row in rows.items() if name != "all")
               for column in rows["all"])
    if rows["all"]["skipped"]:
        assert any(line.startswith("  ") and " skipped: " in line for line in table)
