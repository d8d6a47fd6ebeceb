"""The differential test: one pytest item per cell of the case matrix (see conftest).

A failing cell says how it failed (harness/ledger/failure_class.py) before it fails; where a
KNOWN_FAILURES.md entry covers the cell, that entry's signature decides between an expected
failure and a new one (harness/session/pytest_plugin.py judge_failure).
"""

from __future__ import annotations

import pytest

from harness.cell.cell_matrix import skip_reason
from harness.ledger.failure_class import of_exception, of_mismatch
from harness.cell.run_cell import CellSkipped, run_cell


def test_cell(cell, cell_metrics, judge_failure):
    assert skip_reason(cell) is None, f"{cell.cell_id}: a skip known from data reached the test body " \
                                      "(collection should have marked it)"
    try:
        result = run_cell(cell)
    except CellSkipped as reason:
        pytest.skip(str(reason))
    except Exception as error:
        judge_failure(of_exception(error))
        raise
    cell_metrics(result)
    if not result.ok:
        judge_failure(of_mismatch(result))
    assert result.ok, f"{cell.cell_id} differs from the torch reference: {result.describe()}"
