"""The cascade emulation (harness/probes/census_cascade.py): its parts, its rounding, one real cell
on CPU and its command line."""

from __future__ import annotations

import pytest
import torch

from harness.checks.compare import HALF_ULP
from harness.checks.reference import Query
from harness.probes import census_cascade
from harness.probes.census_cascade import cascade_output, key_parts

CELL = "target_verify-chain-bs2-dtypefloat32-triton-eager"


def test_the_parts_are_the_prefix_and_the_rest():
    query = Query(0, ((0, 5), (7, 9)))
    assert key_parts(query, 4) == [[0, 1, 2, 3], [4, 7, 8]]
    assert key_parts(query, None) == [[0, 1, 2, 3, 4, 7, 8]]


def test_one_part_is_one_rounding_and_two_parts_stay_inside_the_merge_allowance():
    v = torch.randn(40, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    mean = v.mean(0)
    whole = cascade_output(v, [list(range(40))], torch.bfloat16)
    assert torch.equal(whole, mean.to(torch.float32).to(torch.bfloat16).to(torch.float64))
    parts = [list(range(25)), list(range(25, 40))]
    two = cascade_output(v, parts, torch.bfloat16)
    assert not torch.equal(two, whole)  # the partials' own rounding shows
    magnitude = sum(len(p) / 40 * v[p].mean(0).abs() for p in parts)
    assert ((two - mean).abs() <= HALF_ULP["bfloat16"] * (magnitude + two.abs()) * 1.01).all()
    assert (cascade_output(v, parts, torch.float32) - mean).abs().max() < 1e-6


def test_a_float32_cell_stays_inside_the_census_bound():
    cells = {cell.cell_id: cell for cell in census_cascade.expand_cells(census_cascade.load_all_cases())}
    figures = census_cascade.cell_figures(cells[CELL], "prefix")
    assert figures and all(f.over == 0 and f.census_x < 0.01 for f in figures), figures
    assert figures[0].line(CELL, "prefix").startswith(f"{CELL} split=prefix step 0: worst census err ")


def test_the_command_prints_a_line_per_step(capsys):
    assert census_cascade.main([CELL, "--split", "whole"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith(f"{CELL} split=whole step ") for line in lines)


def test_an_unknown_cell_is_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        census_cascade.main(["no-such-cell"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m harness.probes.census_cascade: error: no cell 'no-such-cell' in cases/*.yaml "
        "(see python -m harness.probes.census_cascade --help)"]
