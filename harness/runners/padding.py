"""Padding a batch up to a captured batch size, the way sglang's graph runners do.

prod_fill (decode/eagle-draft/eagle-draft-extend CUDA-graph runners, 0.5.17):
padded rows get seq_len = the backend's fill value, req_pool_index 0 (sglang's
reserved zero row), positions 0, out_cache_loc 0 (the reserved dummy slot);
seq_lens_sum grows by pad * fill and stays None when it was None; the CPU
mirror is padded only when present. DRAFT_EXTEND_V2 rows also get the full
window as their extend length, so kv_len = fill - window goes negative unless
the backend clamps it (sglang PR #26651). A graph's capture batch is all padded rows.
"""

from __future__ import annotations

import copy

import torch

# What a padded row holds in each per-row field, from the backend's fill value and the tokens
# each request brings. The one source of these values (padding and the capture dummy).
PADDED_ROW = {
    "req_pool_indices": lambda fill, per_request: 0,
    "seq_lens": lambda fill, per_request: fill,
    "positions": lambda fill, per_request: 0,
    "out_cache_loc": lambda fill, per_request: 0,
    "extend_seq_lens": lambda fill, per_request: per_request,
    "extend_prefix_lens": lambda fill, per_request: 0,
}
ROW_FIELDS = tuple(PADDED_ROW)  # device tensors with one or more entries per request
HOST_FIELDS = ("batch_size", "seq_lens_sum", "seq_lens_cpu", "extend_seq_lens_cpu", "extend_prefix_lens_cpu")


def _pad(tensor: torch.Tensor, count: int, value) -> torch.Tensor:
    return torch.cat([tensor, torch.full((count,), value, dtype=tensor.dtype, device=tensor.device)])


def pad_rows(forward_batch, capture_bs: int, fill: int, tokens_per_request: int) -> dict:
    """Padded values of every per-row field the graph reads (None where absent)."""
    raw_bs = forward_batch.batch_size
    pad = capture_bs - raw_bs
    padded = {}
    for name, value in PADDED_ROW.items():
        tensor = getattr(forward_batch, name)
        per_row = None if tensor is None else tensor.numel() // raw_bs
        padded[name] = None if tensor is None else _pad(tensor, pad * per_row, value(fill, tokens_per_request))
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
    for name in ("extend_seq_lens_cpu", "extend_prefix_lens_cpu"):
        values = getattr(forward_batch, name)
        if values is not None:
            fields[name] = list(values) + [PADDED_ROW[name.removesuffix("_cpu")](fill, tokens_per_request)] * pad
    return fields


def padded_batch(forward_batch, capture_bs: int, fill: int, tokens_per_request: int):
    """The batch as a graph runner hands it over: a copy with rows and host fields padded."""
    padded = copy.copy(forward_batch)
    for name, value in {**pad_rows(forward_batch, capture_bs, fill, tokens_per_request),
                        **padded_host_fields(forward_batch, capture_bs, fill, tokens_per_request)}.items():
        setattr(padded, name, value)
    return padded
