"""Cells no machine runs are left out of collection and counted; a cell only another machine runs
stays collected, skipped with its reason (harness/cell/cell_matrix.py left_out)."""

from __future__ import annotations

import pytest

from harness.base import platform
from harness.case.cases import CASES_DIR, load_all_cases
from harness.cell.cell_matrix import collectable, expand_cells, left_out, left_out_line, skip_reason
from harness.reporting.summary import render_summary
from harness.base.results import left_out_records


@pytest.fixture(scope="module")
def cells():
    return {cell.cell_id: cell for cell in expand_cells(load_all_cases(CASES_DIR))}


def _one(cells, backend, runner, dtype="float32"):
    return next(cell for cell in cells.values() if (cell.backend, cell.runner, cell.case.spec.dtype)
                == (backend, runner, dtype) and cell.case.mode == "target_verify")


def test_what_no_machine_runs_is_left_out_and_a_gpu_cell_stays_skipped_on_a_cpu(cells, monkeypatch):
    monkeypatch.setattr(platform, "HAS_GPU", False)
    assert left_out(_one(cells, "torch_native", "cuda_graph"))[0] == "a runner form the backend lacks"
    assert left_out(_one(cells, "fa3", "cg_meta", "bfloat16"))[0] == "a runner form the backend lacks"  # not exact
    assert left_out(_one(cells, "fa3", "eager"))[0] == "the backend's own limits"  # FA3 takes no float32
    on_gpu_only = _one(cells, "triton", "cuda_graph")
    assert left_out(on_gpu_only) is None and skip_reason(on_gpu_only) == "CUDA-graph capture needs a GPU"
    assert left_out(_one(cells, "triton", "cg_meta")) is None  # the CPU stand-in runs here


def test_the_cpu_stand_in_is_left_out_on_a_gpu(cells, monkeypatch):
    monkeypatch.setattr(platform, "HAS_GPU", True)
    assert left_out(_one(cells, "triton", "cg_meta"))[0] == "the CPU stand-in on a GPU"
    assert left_out(_one(cells, "triton", "cuda_graph")) is None


def test_left_out_cells_are_counted_in_one_line_and_in_the_summary(cells, monkeypatch):
    monkeypatch.setattr(platform, "HAS_GPU", False)
    kept, dropped = collectable(list(cells.values()))
    assert len(kept) + sum(dropped.values()) == len(cells) and dropped
    line = left_out_line(dropped)
    assert line.startswith(f"left out {sum(dropped.values())} cells no machine runs here") and "\n" not in line
    run = {"left_out": left_out_records(dropped)}
    summary = render_summary({"runs": [run], "cells": []}, [])
    section = summary.split("## Left out: cells no machine runs here, not collected")[1]
    assert "torch_native has no CUDA-graph support" in section and "a runner form the backend lacks" in section
