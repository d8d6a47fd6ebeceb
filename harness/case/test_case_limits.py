"""The memory limit's estimate against what a cell really allocates.

case_limits refuses a case whose buffers would pass the per-cell budget, from an estimate of
the largest ones. The estimate is only honest while it matches what sglang allocates, so this
builds the pools and Triton's CUDA-graph state for the largest cell of two cases (no kernel
runs) and compares the bytes of each distinct storage the estimate models with the estimate.
"""

from __future__ import annotations


import pytest
import torch

from harness.families import BACKENDS
from harness.case.case_limits import BUFFERS, largest_cell_sizes
from harness.case.cases import spec_from_fields
from harness.modes import MODES
from harness.cell.cell_matrix import with_small_real_requests
from harness.cell.run_cell import built_backend

CASES = {
    "target_verify": dict(name="m", bs=4, prefix_lens=3000, input_lens=4, head_dim=128, num_heads=8,
                          num_kv_heads=4, capture_bs=[4, 64]),
    "draft_decode": dict(name="m", bs=2, prefix_lens=5000, topk=2, num_steps=3, num_heads=32, num_kv_heads=8,
                         head_dim=128, capture_bs=[2, 32]),
    # an MLA layer (one latent head of 512 + 64) on Triton as on an H200 (132 SMs): its logits take 128 splits
    "mla-draft_decode": dict(name="m", family="mla", model="deepseek-v3", num_heads=16, bs=2, prefix_lens=3000,
                             topk=2, num_steps=3, capture_bs=[2, 8], backends=["triton_mla"], context_len=4096),
}
H200_SMS = 132


# The graph buffers the estimate models: those that grow with capture size x tokens x context or
# heads. Smaller fixed ones (lse, split counts, from 0.5.19 the lean-decode partials, sized by the
# device's core count) are left out of both sides.
MODELLED_GRAPH_BUFFERS = ("cuda_graph_kv_indices", "cuda_graph_attn_logits")


def _storages(tensors) -> dict[int, int]:
    """Bytes per storage behind ``tensors`` (views of one buffer share a storage)."""
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_estimate_matches_what_a_cell_allocates(case_name, monkeypatch):
    """Each group of buffers within 15% of the bytes sglang and the harness really allocate; an MLA
    case's with sglang told the machine has an H200's SMs, as the estimate is."""
    import sglang.srt.layers.attention.triton_backend as triton_backend

    from harness.base import platform

    monkeypatch.setattr(platform, "sm_count", lambda: H200_SMS)
    monkeypatch.setattr(triton_backend, "get_device_core_count", lambda *args: H200_SMS, raising=False)
    mode_name = case_name.rpartition("-")[2]
    spec, mode = spec_from_fields(CASES[case_name]), MODES[mode_name]
    entry = BACKENDS[spec.backends[0]] if CASES[case_name].get("backends") else BACKENDS["triton"]
    pool, req_to_token, *graph, _eager_logits = (buffer.size(largest_cell_sizes(mode, spec)) for buffer in BUFFERS)
    capture = max(spec.capture_sizes)
    padded = with_small_real_requests(spec, capture)  # the largest cell: small_real at the top size
    with built_backend([padded], mode, entry, extra_rows=capture) as ((state,), _, backend):
        backend.init_cuda_graph_state(capture, capture * mode.tokens_per_request(padded))
    kv, pools = state.pools.kv, state.pools
    owned = _storages([*getattr(kv, "k_buffer", ()), *getattr(kv, "v_buffer", ()), *getattr(kv, "kv_buffer", ()),
                       *state.row_k, *state.row_v])
    indices = _storages([pools.req_to_token.req_to_token])
    graph_state = [getattr(owner, name, None) for owner in (backend, *getattr(backend, "attn_backends", ()))
                   for name in MODELLED_GRAPH_BUFFERS]
    graph_owned = _storages([tensor for tensor in graph_state if isinstance(tensor, torch.Tensor)])
    for estimate, allocated in ((pool, owned), (req_to_token, indices), (sum(graph), graph_owned)):
        assert 0.85 <= estimate / sum(allocated.values()) <= 1.15, (mode_name, estimate, sum(allocated.values()))
