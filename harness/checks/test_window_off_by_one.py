"""Positive control for the sliding window: a window off by one at its edge must fail the cell.

Each windowed cell expected to pass (cases with a sliding_window that no KNOWN_FAILURES.md entry
covers) runs against a reference whose window is one key wider (the backend then sees one key too
few) or one key narrower (one key too many), while sglang's backend keeps the case's window. Wherever
that changes what some query sees, every comparison of the cell's own batch with the reference must
flag it in the key-census head; where it changes nothing (a window over every row), there is
nothing to catch and the direction is skipped with that reason. On CPU this runs the Triton (fp32,
eager and cg_meta) and torch_native rows; on a GPU every backend in bf16 too.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.probes.controls import census_run, matrix_cell
from harness.ledger.known_failures import KNOWN_FAILURES_FILE, load_known_failures, match
from harness.modes import MODES
from harness.fixtures.sglang_env import layer_sliding_window

SHIFTS = {"one-key-too-few": 1, "one-key-too-many": -1}  # the reference's window minus the backend's


def window_cell_ids():
    """Eager and one graph cell (prod_fill, or unpadded) of each windowed case that should pass."""
    from harness.case.cases import load_all_cases
    from harness.cell.cell_matrix import expand_cells

    known = load_known_failures(KNOWN_FAILURES_FILE)
    for cell in expand_cells(load_all_cases()):
        if cell.case.spec.sliding_window and cell.padding in (None, "prod_fill") and not match(known, cell.record_keys()):
            yield cell.cell_id


def shifted(spec, shift: int):
    return spec.model_copy(update=dict(sliding_window=spec.sliding_window + shift))


@pytest.mark.parametrize("shift", SHIFTS.values(), ids=SHIFTS.keys())
@pytest.mark.parametrize("cell_id", window_cell_ids())
def test_a_window_off_by_one_fails_the_cell(cell_id, shift, monkeypatch):
    cell = matrix_cell(cell_id)
    mode = MODES[cell.case.mode]
    own = cell.case.spec
    if [step.queries for step in mode.steps(shifted(own, shift))] == [step.queries for step in mode.steps(own)]:
        pytest.skip(f"a window of {own.sliding_window + shift} shows every query what {own.sliding_window} does")
    steps = type(mode).steps
    monkeypatch.setattr(type(mode), "steps", lambda self, spec: steps(self, shifted(spec, shift)))
    result, _, missed = census_run(cell)
    assert not missed, f"{cell_id}, reference window {own.sliding_window + shift}: not flagged in {missed}: " \
                       f"{result.describe()}"


@pytest.mark.parametrize("window, layer", [(0, None), (2, 1), (4096, 4095)])
def test_the_layer_gets_the_window_as_gemma2_gives_it(window, layer):
    """HF's sliding_window W (p - k < W) reaches sglang as W - 1, the number Gemma 2's model code gives
    both RadixAttention and model_runner.sliding_window_size; no window stays None (no window)."""
    assert layer_sliding_window(SimpleNamespace(sliding_window=window)) == layer
