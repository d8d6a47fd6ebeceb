"""The differential test: one pytest item per cell of the case matrix (see conftest)."""

from __future__ import annotations

import pytest

from harness.run_cell import CellSkipped, run_cell


def test_cell(cell, cell_metrics):
    try:
        result = run_cell(cell)
    except CellSkipped as reason:
        pytest.skip(str(reason))
    cell_metrics(result)
    assert result.ok, f"{cell.cell_id} differs from the torch reference: {result.describe()}"
