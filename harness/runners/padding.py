"""Padding a batch up to a captured batch size, the way sglang's graph runners do.

prod_fill (decode/eagle-draft/eagle-draft-extend CUDA-graph runners, 0.5.17):
padded rows get seq_len = the backend's fill value, req_pool_index 0 (sglang's
reserved zero row), positions 0, out_cache_loc 0 (the reserved dummy slot);
seq_lens_sum grows by pad * fill and stays None when it was None; the CPU
mirror is padded only when present. DRAFT_EXTEND_V2 rows also get the full
window as their extend length, so kv_len = fill - window goes negative unless
the backend clamps it (sglang PR #26651).
"""

from __future__ import annotations

import torch


def _pad(tensor: torch.Tensor, count: int, value) -> torch.Tensor:
    return torch.cat([tensor, torch.full((count,), value, dtype=tensor.dtype, device=tensor.device)])


def pad_rows(forward_batch, capture_bs: int, fill: int, tokens_per_request: int) -> dict:
    """Padded values of every per-row field the graph reads (None where absent)."""
    raw_bs = forward_batch.batch_size
    pad = capture_bs - raw_bs
    slots_per_request = forward_batch.out_cache_loc.numel() // raw_bs
    padded = dict(
        req_pool_indices=_pad(forward_batch.req_pool_indices, pad, 0),
        seq_lens=_pad(forward_batch.seq_lens, pad, fill),
        positions=_pad(forward_batch.positions, pad * tokens_per_request, 0),
        out_cache_loc=_pad(forward_batch.out_cache_loc, pad * slots_per_request, 0),
        extend_seq_lens=None, extend_prefix_lens=None,
    )
    if forward_batch.extend_seq_lens is not None:
        padded["extend_seq_lens"] = _pad(forward_batch.extend_seq_lens, pad, tokens_per_request)
        padded["extend_prefix_lens"] = _pad(forward_batch.extend_prefix_lens, pad, 0)
    return padded


def padded_host_fields(forward_batch, capture_bs: int, fill: int, tokens_per_request: int) -> dict:
    """Host-side fields as the runner hands them to init_forward_metadata_out_graph."""
    pad = capture_bs - forward_batch.batch_size
    seq_lens_cpu = forward_batch.seq_lens_cpu
    fields = dict(
        batch_size=capture_bs,
        seq_lens_sum=None if forward_batch.seq_lens_sum is None else forward_batch.seq_lens_sum + pad * fill,
        seq_lens_cpu=None if seq_lens_cpu is None else _pad(seq_lens_cpu, pad, fill),
    )
    if forward_batch.extend_seq_lens_cpu is not None:
        fields["extend_seq_lens_cpu"] = list(forward_batch.extend_seq_lens_cpu) + [tokens_per_request] * pad
    if forward_batch.extend_prefix_lens_cpu is not None:
        fields["extend_prefix_lens_cpu"] = list(forward_batch.extend_prefix_lens_cpu) + [0] * pad
    return fields
