"""The row-capacity check: a state production reaches that sglang's pools cannot hold fails its cell,
naming the request and the shortfall; it is never skipped.

Positive controls: the wall cells of cases/*_reserve_wall.yaml, which stock sglang holds, run with
less headroom than sglang gives a req_to_token row, as a release without it would: at page size 1
none at all (sglang before its "temporary fix for the context length issue under spec decoding"), at
page size 16 with a tree the 4 + num_draft_tokens columns of a release without the reserve's headroom
(sglang's own revert of PR #26972, debug_utils/pr_fix_toggle.py). Each must fail with the message. And
the one wall case stock sglang cannot hold (findings/spec-reserve-past-req-to-token-row) fails stock and
fits once its fix widens the row.
"""

from __future__ import annotations

import pytest

from harness.probes.controls import matrix_cell
from harness.checks.invariants import InvariantViolation
from harness.cell.run_cell import CellSkipped, run_cell


def _headroom(columns):
    """get_req_to_token_extra_context_len returning ``columns(num_draft_tokens)``, with either signature
    (0.5.17 passes the server args, later releases read them from the runtime context)."""
    def extra(*server_args):
        if server_args:
            return columns(server_args[0].speculative_num_draft_tokens or 0)
        from sglang.srt.runtime_context import max_speculative_num_draft_tokens

        return columns(max_speculative_num_draft_tokens() or 0)
    return extra


def _since_0_5_22(newer: int, older: int) -> int:
    """Shortfalls differ by a column: 0.5.22+ build the overlap batch a token earlier (scheduler_rules)."""
    from harness.base.releases import installed, version_key

    return newer if version_key(installed().contracts) >= version_key("0.5.22") else older


NO_HEADROOM = lambda draft: 0  # noqa: E731
WITHOUT_THE_RESERVE = lambda draft: 4 + draft  # noqa: E731
CONTROLS = {
    # cell: (the headroom a bad release gives, its wall cell's shortfall on 0.5.22+, before)
    "target_verify-past-context-reserve-wall-chain-page1-triton-eager": (NO_HEADROOM, 3, 4),
    "target_verify-past-context-reserve-wall-chain-page1-triton-cg_meta-cbs2-nopad": (NO_HEADROOM, 3, 4),
    "draft_extend_v2-past-context-reserve-wall-chain-page1-triton-eager": (NO_HEADROOM, 3, 4),
    "draft_extend_v2-past-context-reserve-wall-chain-page1-torch_native-eager": (NO_HEADROOM, 3, 4),
    "target_verify-past-context-reserve-wall-tree-page16-triton-eager": (WITHOUT_THE_RESERVE, 118, 118),
    "target_verify-past-context-reserve-wall-tree-page16-triton-cg_meta-cbs2-nopad": (WITHOUT_THE_RESERVE, 118, 118),
}


@pytest.mark.parametrize("cell_id", CONTROLS)
def test_a_wall_cell_fails_when_the_pool_holds_less_than_production_reaches(cell_id, monkeypatch):
    from sglang.srt.mem_cache import allocation_sizing

    columns, newer, older = CONTROLS[cell_id]
    short = _since_0_5_22(newer, older)
    monkeypatch.setattr(allocation_sizing, "get_req_to_token_extra_context_len", _headroom(columns))
    try:
        with pytest.raises(InvariantViolation) as raised:
            run_cell(matrix_cell(cell_id))
    except CellSkipped as reason:  # a failed control must not pass for a skipped one
        pytest.fail(f"{cell_id} was skipped ({reason}), not failed by the capacity check")
    message = str(raised.value)
    assert message.startswith("req_to_token capacity:") and "request 0 (committed 4095)" in message, message
    assert f"{short} column(s) short" in message, message


def test_the_wall_case_stock_sglang_cannot_hold_fails_stock_and_fits_with_its_fix(monkeypatch):
    """past-context-reserve-wall-tree-page1 on stock sglang: 7 columns short (8 before 0.5.22, which builds the batch a
    token later); with spec-reserve-row-width the row holds it (only the check runs: the cell stops
    right after it)."""
    from harness.families import FAMILIES
    from harness.bugs.seed_bugs import FIXES

    cell = matrix_cell("target_verify-past-context-reserve-wall-tree-page1-triton-eager")
    with pytest.raises(InvariantViolation) as raised:
        run_cell(cell)
    assert f"{_since_0_5_22(7, 8)} column(s) short" in str(raised.value), str(raised.value)

    class Held(Exception):
        """The check passed; the cell stops before any kernel runs."""

    def stop(*args, **kwargs):
        raise Held

    from sglang.srt.mem_cache import allocation_sizing

    original = allocation_sizing.get_req_to_token_extra_context_len
    monkeypatch.setattr(FAMILIES["dense"], "build_state", stop)
    try:
        FIXES["spec-reserve-row-width"].apply()
        with pytest.raises(Held):
            run_cell(cell)
    finally:
        allocation_sizing.get_req_to_token_extra_context_len = original
