"""The differential test: one pytest item per cell of the case matrix (see conftest)."""

from __future__ import annotations

import pytest

from harness.cell_matrix import skip_reason
from harness.run_cell import CellSkipped, run_cell


def test_cell(cell, cell_metrics):
    assert skip_reason(cell) is None, f"{cell.cell_id}: a skip known from data reached the test body " \
                                      "(collection should have marked it)"
    try:
        result = run_cell(cell)
    except CellSkipped as reason:
        pytest.skip(str(reason))
    cell_metrics(result)
    assert result.ok, f"{cell.cell_id} differs from the torch reference: {result.describe()}"
