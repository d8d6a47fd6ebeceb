"""Draft decode's paged tree (topk > 1, page_size > 1) is laid out as sglang's worker lays it out.

harness/modes/draft_decode.py gives each branch pages of its own and copies the prefix's tail
into the holes at the start of branches 1.. (see its docstring). sglang's worker does both in
eagle_worker_common.prepare_for_draft: it gathers out_cache_loc from the branch positions and
calls duplicate_prefix_tail_to_draft_branches. Here that very function runs on pools the harness
built (stopped where it would build the ForwardBatch) and must pick the slots the harness's
ForwardBatch writes and leave the KV pool as the harness's own copy leaves it, on every release
the venv holds. Where a backend reads the branch tokens is checked by every Triton cell of the
matrix: generate_draft_decode_kv_indices reads them from sglang's formula.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.base.case_spec import CaseSpec
from harness.case.cases import spec_from_fields
from harness.modes import DRAFT_DECODE
from harness.fixtures.pools import build_layout, build_state
from harness.fixtures.sglang_env import server_fields, sglang_state


class _BatchBuilt(Exception):
    """prepare_for_draft reached ForwardBatch.init_new: the slots and the KV moves are done."""


def _state(spec: CaseSpec, server_args):
    row_lens = DRAFT_DECODE.row_lens(spec)
    layout = build_layout(spec.kv_layout, row_lens, spec.page_size, spec.seed, extra_rows=2)
    return build_state(spec, layout, row_lens, "cpu", server_args)


def _sglangs_draft_slots(state, monkeypatch) -> torch.Tensor:
    """out_cache_loc as sglang's prepare_for_draft picks it, its KV moves made on ``state``'s pool."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_worker_common
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    def stop(batch, *args, **kwargs):
        raise _BatchBuilt

    monkeypatch.setattr(eagle_worker_common.ForwardBatch, "init_new", stop)
    spec = state.spec
    batch = SimpleNamespace(forward_mode=ForwardMode.DECODE, seq_lens=state.tensor(spec.prefix_lens),
                            req_pool_indices=state.tensor(state.layout.req_pool_indices),
                            token_to_kv_pool_allocator=SimpleNamespace(page_size=spec.page_size),
                            device="cpu", out_cache_loc=None)
    # The pool's own token-granular move (SGLANG_NATIVE_MOVE_KV_CACHE's): its Triton copy kernel
    # needs a pool built with enable_kv_cache_copy; which slots move is the worker's choice either way.
    state.pools.kv.use_native_move_kv_cache = True
    runner = SimpleNamespace(token_to_kv_pool=state.pools.kv,
                             spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE"))
    with pytest.raises(_BatchBuilt):
        eagle_worker_common.prepare_for_draft(SimpleNamespace(), state.pools.req_to_token, batch, None, runner,
                                              spec.topk, spec.num_steps)
    return batch.out_cache_loc


@pytest.mark.parametrize("prefix_lens", [[21, 16, 45], [1, 15, 33]], ids=["tails-5-0-13", "tails-1-15-1"])
@pytest.mark.parametrize("kv_layout", ["shuffled", "non_monotonic"])
def test_paged_tree_slots_and_tail_copies_are_sglangs(prefix_lens, kv_layout, monkeypatch):
    spec = spec_from_fields(dict(name="paged-tree", bs=3, prefix_lens=prefix_lens, topk=3, num_steps=3,
                                 page_size=16, kv_layout=kv_layout))
    with sglang_state(server_fields(spec, "triton", DRAFT_DECODE.speculative_args(spec))) as server_args:
        ours, theirs = _state(spec, server_args), _state(spec, server_args)  # one seed: the same pools
        forward_batch = DRAFT_DECODE.forward_batch(ours, DRAFT_DECODE.steps(spec))
        sglang_slots = _sglangs_draft_slots(theirs, monkeypatch)
    assert forward_batch.out_cache_loc.tolist() == sglang_slots.tolist()
    for mine, sglangs in ((ours.pools.kv.k_buffer[0], theirs.pools.kv.k_buffer[0]),
                          (ours.pools.kv.v_buffer[0], theirs.pools.kv.v_buffer[0])):
        torch.testing.assert_close(mine, sglangs, rtol=0, atol=0, equal_nan=True)
    copied = 0
    for request in range(spec.bs):  # the harness's copy of the K/V holds the tail in the holes too
        holes, sources = DRAFT_DECODE.tail_copies(spec, request)
        assert torch.equal(ours.row_k[request][holes], ours.row_k[request][sources])
        assert torch.equal(ours.row_v[request][holes], ours.row_v[request][sources])
        copied += len(holes)
    assert copied == 2 * sum(p % spec.page_size for p in prefix_lens)  # branches 1 and 2 each copy the tail
