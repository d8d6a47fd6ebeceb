"""Helpers for positive controls: real cells of the matrix with one thing broken on purpose."""

from __future__ import annotations

import dataclasses
import functools
from types import SimpleNamespace

import torch

from harness.base.case_spec import Case
from harness.case.cases import load_all_cases
from harness.cell.cell_matrix import Cell, expand_cells


@functools.lru_cache(maxsize=1)
def _matrix_cells() -> dict[str, Cell]:
    """Every cell of cases/*.yaml by id, expanded once a process: a control test parametrized over
    hundreds of cells looked each up by expanding the whole matrix again (0.4 s a lookup, most of the
    time of the controls that skip off a GPU)."""
    return {cell.cell_id: cell for cell in expand_cells(load_all_cases())}


def matrix_cell(cell_id: str) -> Cell:
    """The cell of cases/*.yaml with this id (as pytest shows it)."""
    try:
        return _matrix_cells()[cell_id]
    except KeyError:
        raise KeyError(f"no cell {cell_id!r} in cases/*.yaml") from None


def with_long_prefix(cell: Cell, prefix: int) -> Cell:
    """The same cell with its longest request's committed prefix set to ``prefix`` tokens."""
    spec = cell.case.spec
    longest = max(range(spec.bs), key=lambda r: spec.prefix_lens[r])
    prefix_lens = [prefix if r == longest else n for r, n in enumerate(spec.prefix_lens)]
    long_spec = spec.model_copy(update=dict(name=f"{spec.name}-prefix{prefix}", prefix_lens=prefix_lens))
    return dataclasses.replace(cell, case=Case(cell.case.mode, long_spec, cell.case.source))


def census_run(cell: Cell):
    """Run a control cell; (its result, its own batch's comparisons with the reference, the names of
    those the key census did not flag). A cell that cannot run here skips the calling test.

    A graph cell's extra replay batch (harness/cell/cell_matrix.py replay_batches) holds other requests,
    which the broken thing need not touch, so only the cell's own batch is held to account.
    """
    import pytest

    from harness.cell.run_cell import CellSkipped, run_cell

    try:
        result = run_cell(cell)
    except CellSkipped as reason:
        pytest.skip(str(reason))
    against_reference = {name: c for name, c in result.comparisons.items()
                         if "vs reference" in name and "extra bs" not in name}
    return result, against_reference, [name for name, c in against_reference.items() if c.census_mismatch_frac == 0]


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
    slot = int(state.layout.row_slots[donor][position])
    row = state.layout.req_pool_indices[target]
    state.pools.req_to_token.req_to_token[row, 0] = slot
    return f"request {target} position 0 -> slot {slot} (request {donor} position {position})"


def write_past_end(buffer: torch.Tensor, value, past: int = 0) -> None:
    """Store ``value`` ``past`` elements after the last element of a contiguous buffer,
    through a strided view that reaches past it, as a kernel indexing the allocation would."""
    reach = buffer.numel() + past + 1
    torch.as_strided(buffer, (reach,), (1,), buffer.storage_offset())[-1] = value


def overrun_after_metadata_init(monkeypatch, cls, buffer_of) -> None:
    """Make ``cls.init_forward_metadata_out_graph`` write one element past ``buffer_of(backend)``."""
    original = cls.init_forward_metadata_out_graph

    def overrunning(self, forward_batch, in_capture: bool = False):
        original(self, forward_batch, in_capture=in_capture)
        write_past_end(buffer_of(self).flatten(), 1)

    monkeypatch.setattr(cls, "init_forward_metadata_out_graph", overrunning)


class _GuardedHere(Exception):
    """Stops a cell right after its graph buffers are guarded."""


def guarded_graph_state(cell_id: str, monkeypatch) -> SimpleNamespace:
    """Run a real graph cell up to the guarding of its buffers; return backend, guards and
    what was guarded (allocation name -> paths), without running any forward."""
    from harness.cell.run_cell import run_cell
    from harness.runners import cuda_graph

    real = cuda_graph.guard_graph_buffers
    seen = SimpleNamespace()

    def stop(guards, backend, before):
        seen.named, seen.backend, seen.guards = real(guards, backend, before), backend, guards
        raise _GuardedHere

    with monkeypatch.context() as patch:
        patch.setattr(cuda_graph, "guard_graph_buffers", stop)
        try:
            run_cell(matrix_cell(cell_id))
        except _GuardedHere:
            return seen
    raise AssertionError(f"{cell_id}: the cell ended before guarding its graph buffers")
