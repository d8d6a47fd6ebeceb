"""The batch-invariance oracle (harness/cell/batch_invariance.py): what it runs, and that it fires.

Positive control: a planted read of one neighbour's key. While a batch's metadata is built, its
first request's first committed position points at its neighbour's first key, so the request reads
that key whenever it is batched with a neighbour and its own when alone, the batch-dependent
misread the oracle exists for. With a long prefix the wrong key moves the output less than every
tolerance (the key census included), so the comparisons with the reference pass; the bitwise
comparison of sglang's deterministic inference must still fail. With a short prefix the tolerance
catches it too, and so must the invariance comparison of a cell without deterministic inference.
On CPU the Triton rows run; on a GPU every backend sglang serves deterministic inference on.
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.base.case_spec import Case
from harness.case.cases import load_all_cases
from harness.cell import batch_invariance, run_cell as run_cell_module
from harness.cell.batch_invariance import Cut, cuts, sampled_requests
from harness.cell.cell_matrix import expand_cells
from harness.families import FAMILIES
from harness.modes.target_verify import draft_tree
from harness.probes.controls import matrix_cell

LONG_PREFIX = 6000  # one wrong key of 6000 moves an output below its dtype's tolerance and the key census's


def _spec(**update):
    return matrix_cell("target_verify-invariant-tree-dtypefloat32-deterministicFalse-triton-eager").case.spec.model_copy(
        update=update)


def test_sampled_requests_are_the_boundary_rows_and_seeded_others():
    spec = _spec(prefix_lens=[50, 9, 300, 12, 80, 7, 61, 44, 19, 5])
    picked = sampled_requests(spec)
    assert {0, 9, 2} <= set(picked)  # first, last (also the shortest), longest
    assert len(picked) == 3 + batch_invariance.RANDOM_ROWS
    assert picked == sampled_requests(spec)
    small = _spec(prefix_lens=[5, 6, 7])
    assert sampled_requests(small) == [0, 1, 2]


def test_cuts_run_each_sampled_request_alone_then_the_first_half():
    spec = _spec()
    assert [cut.label for cut in cuts(spec)] == [f"request {r} alone" for r in range(6)] + ["requests 0..2 as a batch"]
    assert cuts(_spec(prefix_lens=[9], input_lens=[6])) == []


def test_a_cut_request_keeps_its_tree():
    spec = _spec()
    for request in range(spec.bs):
        alone = Cut(request, request + 1).spec(spec)
        assert alone.prefix_lens == [spec.prefix_lens[request]]
        assert draft_tree(alone, 0) == draft_tree(spec, request)


def test_first_request_is_no_file_field():
    from harness.case.cases import CaseFields

    assert "first_request" not in CaseFields.model_fields
    assert "batch_invariance" in CaseFields.model_fields and "deterministic" in CaseFields.model_fields


def test_deterministic_inference_is_refused_where_sglang_refuses_it():
    from harness.families import BACKENDS

    spec = _spec(deterministic=True, dtype="bfloat16")
    assert BACKENDS["triton"].refusal("target_verify", spec) is None
    reason = BACKENDS["torch_native"].refusal("target_verify", spec)
    assert reason and "deterministic inference of a dense model" in reason and "'triton'" in reason
    mla = _spec(deterministic=True, dtype="bfloat16", family="mla", model="deepseek-v2-lite", num_heads=2, num_kv_heads=2)
    assert BACKENDS["flashinfer_mla"].refusal("target_verify", mla) and BACKENDS["fa3_mla"].refusal("target_verify", mla) is None


def _invariance_cells(deterministic: bool):
    for cell in expand_cells(load_all_cases()):
        spec = cell.case.spec
        if (spec.name.startswith("invariant-tree-") and cell.runner == "eager"
                and spec.deterministic == deterministic):
            yield cell.cell_id


def _with_request0_prefix(cell_id: str, prefix: int):
    cell = matrix_cell(cell_id)
    spec = cell.case.spec
    long_spec = spec.model_copy(update=dict(name=f"{spec.name}-prefix{prefix}",
                                            prefix_lens=[prefix, *spec.prefix_lens[1:]]))
    return dataclasses.replace(cell, case=Case(cell.case.mode, long_spec, cell.case.source))


def _plant_neighbour_read(monkeypatch, family) -> list[str]:
    """Every eager metadata init of a batch of two or more requests sees request 0's position 0
    pointed at request 1's position 0 (restored right after): a read of the neighbour's key that
    exists only in company."""
    planted, states = [], []
    run_eager, build_state = run_cell_module.run_eager, family.build_state

    def build_and_keep(*args, **kwargs):
        states.append(build_state(*args, **kwargs))
        return states[-1]

    def run_eager_with_neighbour_read(mode, backend, forward_batch, *args, **kwargs):
        if forward_batch.batch_size < 2:
            return run_eager(mode, backend, forward_batch, *args, **kwargs)
        table = states[-1].pools.req_to_token.req_to_token  # sglang's ReqToTokenPool table every backend reads
        mine, neighbour = (int(row) for row in forward_batch.req_pool_indices[:2].tolist())
        own = table[mine, 0].clone()
        table[mine, 0] = table[neighbour, 0]
        planted.append(f"batch of {forward_batch.batch_size}: request 0 position 0 reads request 1's key")
        try:
            return run_eager(mode, backend, forward_batch, *args, **kwargs)
        finally:
            table[mine, 0] = own

    monkeypatch.setattr(family, "build_state", build_and_keep)
    monkeypatch.setattr(run_cell_module, "run_eager", run_eager_with_neighbour_read)
    return planted


def _run(cell):
    try:
        return run_cell_module.run_cell(cell)
    except run_cell_module.CellSkipped as reason:
        pytest.skip(str(reason))


@pytest.mark.parametrize("cell_id", _invariance_cells(deterministic=True))
def test_a_neighbour_read_below_every_tolerance_fails_the_bitwise_check(cell_id, monkeypatch):
    cell = _with_request0_prefix(cell_id, LONG_PREFIX)
    planted = _plant_neighbour_read(monkeypatch, FAMILIES[cell.case.spec.family])
    result = _run(cell)
    assert planted, "the plant never ran"
    against_reference = {name: c for name, c in result.comparisons.items() if "vs reference" in name}
    assert against_reference and all(c.ok for c in against_reference.values()), (
        f"the control must stay inside the tolerance to prove anything: {result.describe()}")
    alone = result.comparisons["request 0 alone vs in the batch step 0"]
    assert not alone.ok, f"the bitwise check missed a neighbour's key: {alone.describe()}"
    print(f"\n{cell_id}: reference passed (worst {max(c.max_abs_err for c in against_reference.values()):.3g}); "
          f"request 0 alone differs by {alone.max_abs_err:.3g}")


@pytest.mark.parametrize("cell_id", _invariance_cells(deterministic=False))
def test_a_neighbour_read_fails_the_tolerance_check_without_deterministic_inference(cell_id, monkeypatch):
    cell = matrix_cell(cell_id)
    _plant_neighbour_read(monkeypatch, FAMILIES[cell.case.spec.family])
    result = _run(cell)
    alone = result.comparisons["request 0 alone vs in the batch step 0"]
    assert not alone.ok, f"a neighbour's key in a 40-key prefix passed the invariance check: {alone.describe()}"


@pytest.mark.parametrize("cell_id", _invariance_cells(deterministic=True))
def test_without_the_plant_every_cut_matches_bitwise(cell_id):
    result = _run(matrix_cell(cell_id))
    cut_names = [name for name in result.comparisons if "vs in the batch" in name]
    assert len(cut_names) == len(cuts(matrix_cell(cell_id).case.spec))
    assert result.ok, result.describe()
