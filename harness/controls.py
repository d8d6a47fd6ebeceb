"""Helpers for positive controls that run real cells of the matrix with one thing broken."""

from __future__ import annotations

from harness.cases import load_all_cases
from harness.cell_matrix import Cell, expand_cells


def matrix_cell(cell_id: str) -> Cell:
    """The cell of cases/*.yaml with this id (as pytest shows it)."""
    for candidate in expand_cells(load_all_cases()):
        if candidate.cell_id == cell_id:
            return candidate
    raise KeyError(f"no cell {cell_id!r} in cases/*.yaml")


def misdirect_one_key(state) -> str:
    """Point one committed KV position of the batch at another request's written slot.

    The backend then attends one wrong key; the harness's own copy of K/V (what
    the reference reads) is untouched. Request r's prefix position 0 is
    redirected to the slot of another request's prefix position 0, or, in a
    one-request batch, to its own position 1. Returns what was done, for messages.
    """
    prefix = state.spec.prefix_lens
    target = max(range(len(prefix)), key=lambda r: prefix[r])
    donors = [r for r in range(len(prefix)) if r != target and prefix[r] > 0]
    donor, position = (donors[0], 0) if donors else (target, 1)
    if prefix[target] == 0 or (donor == target and prefix[target] < 2):
        raise ValueError(f"case {state.spec.name}: no committed key to misdirect")
    slot = state.layout.row_slots[donor][position]
    row = state.layout.req_pool_indices[target]
    state.pools.req_to_token.req_to_token[row, 0] = slot
    return f"request {target} position 0 -> slot {slot} (request {donor} position {position})"
