"""Every size at which a backend switches path (harness/case/thresholds.py) has hand cells on both sides.

Per entry, per backend and mode it applies to, on the installed release: some collected cell of the case
files stands below the threshold and some above (among the cells that meet the entry's precondition).
The quoted condition must still be in the installed release's source. And the check itself must bite:
with the cells above a threshold taken away, the entry is reported.
"""

from __future__ import annotations

from collections import Counter

import pytest

from harness.case.cases import load_all_cases
from harness.case.thresholds import QUANTITIES, THRESHOLDS, Threshold
from harness.cell.cell_matrix import expand_cells, left_out
from harness.families import BACKENDS
from harness.modes import MODES

SIDES = ("below", "above")


def _cells():
    """The case files' cells some machine runs under the installed release."""
    return [cell for cell in expand_cells(load_all_cases()) if left_out(cell) is None]


def uncovered(threshold: Threshold, cells) -> list[str]:
    """'<backend> <mode>: no cell <side>' for each backend and mode of the entry missing a side."""
    missing = []
    for backend in threshold.backends:
        for mode in threshold.modes:
            sides = Counter(threshold.side(cell.case.spec) for cell in cells
                            if cell.backend == backend and cell.case.mode == mode)
            missing += [f"{backend} {mode}: no cell {side} {threshold.quantity} {threshold.at}"
                        for side in SIDES if not sides[side]]
    return missing


APPLYING = [threshold for threshold in THRESHOLDS if threshold.applies_here()]


@pytest.fixture(scope="module")
def cells():
    return _cells()


def test_entries_name_known_backends_modes_and_quantities():
    assert len({threshold.id for threshold in THRESHOLDS}) == len(THRESHOLDS)
    for threshold in THRESHOLDS:
        assert set(threshold.backends) <= set(BACKENDS) and set(threshold.modes) <= set(MODES), threshold.id
        assert threshold.quantity in QUANTITIES and (threshold.given is None or threshold.given[0] in QUANTITIES)


@pytest.mark.parametrize("threshold", APPLYING, ids=lambda threshold: threshold.id)
def test_the_quoted_condition_is_in_this_release(threshold):
    assert threshold.source_problem() is None, threshold.source_problem()


@pytest.mark.parametrize("threshold", APPLYING, ids=lambda threshold: threshold.id)
def test_hand_cells_stand_on_both_sides(threshold, cells):
    missing = uncovered(threshold, cells)
    assert not missing, f"{threshold.id} ({threshold.switches}): {'; '.join(missing)}"


def test_taking_the_cells_above_away_is_caught(cells):
    threshold = next(t for t in APPLYING if t.id == "triton-split-schedule")
    below_only = [cell for cell in cells if threshold.side(cell.case.spec) != "above"]
    assert uncovered(threshold, cells) == []
    assert uncovered(threshold, below_only) == [
        "triton draft_decode: no cell above bs 256", "triton_mla draft_decode: no cell above bs 256"]


def test_a_precondition_keeps_other_cells_out():
    threshold = next(t for t in THRESHOLDS if t.id == "triton-deterministic-tile")
    spec = load_all_cases()[0].spec
    assert threshold.side(spec.model_copy(update=dict(deterministic=False))) is None
    assert threshold.side(spec.model_copy(update=dict(deterministic=True, prefix_lens=[300]))) == "above"
