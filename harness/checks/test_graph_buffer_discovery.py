"""Graph buffers found from the backend object and guarded, aliasing intact.

Two subjects: a stand-in shaped like FA3/FA4's graph state (dicts of tensors,
a frozen verify-mask struct, one tensor held twice, a view of another buffer),
which cannot be built without a GPU; and sglang's real Triton backends in every
role, through the cg_meta path of real cells.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from harness.families import BACKENDS
from harness.cell.run_cell import CellSkipped, run_cell
from harness.probes.controls import guarded_graph_state, matrix_cell, overrun_after_metadata_init, write_past_end
from harness.checks.graph_buffers import (UndeclaredGraphBuffer, buffer_name, check_declared, guard_graph_buffers,
                                   reachable_memory)
from harness.checks.guards import CanaryTripped, Guards


class FlashAttentionShaped:
    """FA3's init_cuda_graph_state in miniature (sglang 0.5.17 flashattention_backend)."""

    def __init__(self, pool):
        self.req_to_token_pool = pool  # the harness's: never guarded, never walked
        self.req_to_token = pool.req_to_token
        self.kv_indptr = torch.zeros(5, dtype=torch.int32)  # allocated before: not a graph buffer
        self.forward_metadata = None

    def init_cuda_graph_state(self, max_bs: int, max_context_len: int = 16):
        from sglang.srt.layers.attention.verify_mask import maybe_create_verify_mask

        def tables():
            return {"cache_seqlens": torch.zeros(max_bs, dtype=torch.int32),
                    "cu_seqlens_q": torch.arange(0, max_bs + 1, dtype=torch.int32),
                    "cu_seqlens_k": torch.zeros(max_bs + 1, dtype=torch.int32),
                    "page_table": torch.zeros(max_bs, max_context_len, dtype=torch.int32)}

        self.decode_cuda_graph_metadata = tables()
        self.target_verify_metadata = {**tables(), "strided_indices": torch.arange(0, max_context_len)}
        self.draft_extend_metadata = tables()
        # one tensor held from two places, and a view of another buffer
        self.draft_extend_metadata["strided_indices"] = self.target_verify_metadata["strided_indices"]
        self.decode_cuda_graph_metadata["page_table_draft_decode"] = self.target_verify_metadata["page_table"][1:]
        self._sched_meta_buf = torch.zeros(1 + 4 * 4, dtype=torch.int32)
        self._verify_mask = maybe_create_verify_mask(
            is_draft_runner=False, skip_prefill=False, max_bs=max_bs, max_context_len=max_context_len,
            num_draft_tokens=4, device="cpu", is_read=True)
        self.encoder_metadata = {}


def guarded_stand_in():
    pool = SimpleNamespace(req_to_token=torch.zeros(4, 16, dtype=torch.int32))
    backend = FlashAttentionShaped(pool)
    kept = backend.kv_indptr
    before = reachable_memory(backend)
    backend.init_cuda_graph_state(max_bs=3)
    original = dict(backend.target_verify_metadata)
    guards = Guards()
    named = guard_graph_buffers(guards, backend, before)
    return SimpleNamespace(backend=backend, guards=guards, named=named, pool=pool, kept=kept, original=original)


def test_stand_in_buffers_are_all_found_and_named():
    found = guarded_stand_in()
    assert {buffer_name(p) for paths in found.named.values() for p in paths} == {
        *(f"{table}[{key!r}]" for table in ("decode_cuda_graph_metadata", "target_verify_metadata",
                                            "draft_extend_metadata")
          for key in ("cache_seqlens", "cu_seqlens_q", "cu_seqlens_k", "page_table")),
        "target_verify_metadata['strided_indices']", "draft_extend_metadata['strided_indices']",
        "decode_cuda_graph_metadata['page_table_draft_decode']", "_sched_meta_buf", "_verify_mask.buffer"}
    # one allocation each: the shared tensor and the view share their base's guard
    assert found.named["target_verify_metadata['page_table']"] == [
        "decode_cuda_graph_metadata['page_table_draft_decode']", "target_verify_metadata['page_table']"]
    check_declared(found.named, BACKENDS["fa3"].graph_buffers.value, "fa3")


def test_stand_in_guarding_keeps_values_aliases_and_views():
    found = guarded_stand_in()
    backend, guards = found.backend, found.guards
    for table in (backend.decode_cuda_graph_metadata, backend.target_verify_metadata,
                  backend.draft_extend_metadata):
        assert all(guards.capacity(t) is not None for t in table.values())
    verify = backend.target_verify_metadata
    assert torch.equal(verify["cu_seqlens_q"], found.original["cu_seqlens_q"])
    assert backend.draft_extend_metadata["strided_indices"] is verify["strided_indices"]
    view = backend.decode_cuda_graph_metadata["page_table_draft_decode"]
    verify["page_table"][2, 5] = 77
    assert view[1, 5] == 77 and view.shape == (2, 16)
    assert guards.capacity(backend._verify_mask.buffer) == backend._verify_mask.buffer.numel()
    assert backend._verify_mask.max_bs == 3
    assert backend.kv_indptr is found.kept and backend.req_to_token is found.pool.req_to_token


def test_stand_in_overrun_trips_the_canary_of_its_buffer():
    found = guarded_stand_in()
    write_past_end(found.backend.target_verify_metadata["cache_seqlens"], 9)
    with pytest.raises(CanaryTripped, match=re.escape(
            "after replay: out-of-bounds write past target_verify_metadata['cache_seqlens']: element 3 "
            "changed, but it holds 3 int32 elements (recorded when guarded)")):
        found.guards.check("after replay")


def test_a_buffer_the_entry_does_not_declare_fails():
    found = guarded_stand_in()
    with pytest.raises(UndeclaredGraphBuffer, match=re.escape(
            "fa4: init_cuda_graph_state allocated _sched_meta_buf, which the 'fa4' entry "
            "(harness/families/<family>/backends.py) does not declare in graph_buffers")):
        check_declared(found.named, BACKENDS["fa4"].graph_buffers.value, "fa4")


TRITON_ROLES = {  # one cell per role and topk, the draft window (sglang 0.5.21+) and the model's window
    "target": "target_verify-tree-bs3-dtypefloat32-triton-cg_meta-cbs3-nopad",
    "draft": "draft_extend_v2-window4-bs2-dtypefloat32-triton-cg_meta-cbs2-nopad",
    "draft_multi_step topk 1": "draft_decode-chain-bs2-dtypefloat32-triton-cg_meta-cbs2-nopad",
    "draft_multi_step topk 2": "draft_decode-topk2-bs3-dtypefloat32-triton-cg_meta-cbs3-nopad",
    "draft_multi_step window": "draft_decode-window-sink-dtypefloat32-triton-cg_meta-cbs3-nopad",
    "target sliding window": "target_verify-swa-chain-dtypefloat32-triton-cg_meta-cbs5-prod_fill",
    "draft sliding window": "draft_extend_v2-swa-window4-dtypefloat32-triton-cg_meta-cbs5-prod_fill",
    "draft_multi_step sliding window": "draft_decode-swa-edge-dtypefloat32-triton-cg_meta-cbs3-prod_fill",
}


def guarded_names(cell_id: str, monkeypatch) -> set[str]:
    """Declared-style names of what a cell guards; empty when the cell does not run here."""
    try:
        named = guarded_graph_state(cell_id, monkeypatch).named
    except CellSkipped:
        return set()
    return {buffer_name(path) for paths in named.values() for path in paths}


def test_triton_roles_guard_exactly_the_declared_buffers(monkeypatch):
    """Every declared buffer is found in some role, and nothing undeclared: a stale list fails."""
    declared = set(BACKENDS["triton"].graph_buffers.value)
    names = {role: guarded_names(cell_id, monkeypatch) for role, cell_id in TRITON_ROLES.items()}
    assert names["target"] <= declared and "_verify_mask.buffer" in names["target"]
    assert set().union(*names.values()) == declared


def test_triton_multi_step_rows_and_shared_buffers_stay_aliased(monkeypatch):
    seen = guarded_graph_state(TRITON_ROLES["draft_multi_step topk 2"], monkeypatch)
    owner, steps = seen.backend, seen.backend.attn_backends
    assert seen.guards.capacity(owner.cuda_graph_kv_indices) == owner.cuda_graph_kv_indices.numel()
    for step, inner in enumerate(steps):
        assert inner.cuda_graph_kv_indices.data_ptr() == owner.cuda_graph_kv_indices[step].data_ptr()
        assert inner.cuda_graph_num_kv_splits is owner.cuda_graph_num_kv_splits
        assert seen.guards.capacity(inner.cuda_graph_attn_logits) == inner.cuda_graph_attn_logits.numel()
    for shared in ("cuda_graph_kv_indices", "cuda_graph_num_kv_splits"):  # one allocation each
        assert seen.named[shared] == [f"attn_backends[0].{shared}", f"attn_backends[1].{shared}", shared]


def test_real_triton_kv_indices_overrun_trips_its_canary(monkeypatch):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    overrun_after_metadata_init(monkeypatch, TritonAttnBackend, lambda backend: backend.cuda_graph_kv_indices)
    with pytest.raises(CanaryTripped, match=re.escape(
            "after capture: out-of-bounds write past cuda_graph_kv_indices: element 32768 changed, but it "
            "holds 32768 int64 elements (recorded when guarded)")):
        run_cell(matrix_cell("target_verify-chain-bs2-dtypefloat32-triton-cg_meta-cbs2-nopad"))


def test_real_triton_step_backend_float_buffer_overrun_trips_its_canary(monkeypatch):
    from sglang.srt.layers.attention.triton_backend import TritonMultiStepDraftBackend

    overrun_after_metadata_init(monkeypatch, TritonMultiStepDraftBackend,
                                lambda backend: backend.attn_backends[1].cuda_graph_attn_logits)
    with pytest.raises(CanaryTripped, match=re.escape(
            "after capture: out-of-bounds write past attn_backends[1].cuda_graph_attn_logits: element 4096 "
            "changed, but it holds 4096 float32 elements")):
        run_cell(matrix_cell("draft_decode-chain-bs2-dtypefloat32-triton-cg_meta-cbs2-nopad"))
