"""The MLA oracle: absorbed multi-head latent attention over the latent cache, in float64.

Written from the attention's algebra, never from sglang's kernels. DeepSeek-V2's attention for head
h is softmax(scale * (q_nope_h . k_nope_h(t) + q_pe_h . k_pe(t))) summed against v_h(t), where the
per-head key and value are up-projections of one cached latent c(t): k_nope_h(t) = W_UK_h c(t) and
v_h(t) = W_UV_h c(t). Absorbing W_UK into the query (q_lat_h = W_UK_h^T q_nope_h) makes every head
read the same cache row [c(t), k_pe(t)]:

    out_lat_h = sum_t softmax_t(scale * (q_lat_h . c(t) + q_pe_h . k_pe(t))) c(t)

and the model applies W_UV_h after attention. The backend gets q = [q_lat, q_pe] per head and
returns out_lat; this module computes out_lat from the same inputs and the harness's own copy of
each request's cache row, over exactly the row positions each query may see (the modes' ``Query``,
as the dense oracle), so no index a backend builds can leak into the answer. ``unabsorbed`` is the
same attention before absorption (per-head K and V expanded from the latent), which the tests use to
check this one.

As the dense oracle: a visible key never written (NaN in the harness's copy) makes the query's
output NaN, and keys a query may not see get weight exactly 0.
"""

from __future__ import annotations

import torch

from harness.checks.reference import Query, span_bounds, visibility_mask
from harness.base.transfers import to_device_together


def mla_reference(q: torch.Tensor, queries: list[Query], row_cache: list[torch.Tensor], kv_lora_rank: int,
                  scale: float) -> torch.Tensor:
    """q: [num_queries, heads, kv_lora_rank + rope] (the absorbed query and the rope query);
    row_cache: per request [row_len, 1, kv_lora_rank + rope] (latent then rope key, NaN where
    unwritten). Returns float64 [num_queries, heads, kv_lora_rank] on the cache's device."""
    device = row_cache[0].device if row_cache else q.device
    q64 = q.detach().to(device, torch.float64)
    out = torch.empty((*q64.shape[:2], kv_lora_rank), dtype=torch.float64, device=device)
    by_request: dict[int, list[int]] = {}
    for index, query in enumerate(queries):
        by_request.setdefault(query.request, []).append(index)
    for request, indices in by_request.items():
        cache = row_cache[request][:, 0].to(torch.float64)  # [row_len, kv_lora_rank + rope]
        unwritten = torch.isnan(cache).any(dim=1)
        cache = torch.where(unwritten[:, None], 0.0, cache)
        latent, rope_key = cache[:, :kv_lora_rank], cache[:, kv_lora_rank:]
        rows, bounds = to_device_together(device, torch.tensor(indices),
                                          span_bounds([queries[i] for i in indices]))
        mine = q64[rows]  # [n, heads, kv_lora_rank + rope]
        scores = (torch.einsum("nhc,lc->nhl", mine[..., :kv_lora_rank], latent)
                  + torch.einsum("nhr,lr->nhl", mine[..., kv_lora_rank:], rope_key)) * scale
        visible = visibility_mask(bounds, cache.shape[0])  # [n, row_len]
        weights = torch.softmax(scores.masked_fill(~visible[:, None], float("-inf")), dim=-1)
        found = torch.einsum("nhl,lc->nhc", weights, latent)
        reads_unwritten = (visible & unwritten[None]).any(dim=1)
        out[rows] = torch.where(reads_unwritten[:, None, None], float("nan"), found)
    return out


def unabsorbed(q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, rope_key: torch.Tensor,
               w_uk: torch.Tensor, w_uv: torch.Tensor, visible: torch.Tensor, scale: float) -> torch.Tensor:
    """One request's attention as the model defines it before absorption, float64: every head's own
    keys [W_UK_h c(t), k_pe(t)] and values W_UV_h c(t) expanded from the latent.

    q_nope [n, heads, nope], q_pe [n, heads, rope], latent [L, rank], rope_key [L, rope],
    w_uk [heads, nope, rank], w_uv [heads, rank, v_dim], visible bool [n, L] -> [n, heads, v_dim].
    """
    keys_nope = torch.einsum("hdr,lr->hld", w_uk, latent)  # [heads, L, nope]
    values = torch.einsum("hrv,lr->hlv", w_uv, latent)  # [heads, L, v_dim]
    out = torch.empty((*q_nope.shape[:2], w_uv.shape[-1]), dtype=torch.float64)
    for head in range(q_nope.shape[1]):
        keys = torch.cat([keys_nope[head], rope_key], dim=1)  # [L, nope + rope]
        query = torch.cat([q_nope[:, head], q_pe[:, head]], dim=1)  # [n, nope + rope]
        scores = (query @ keys.T) * scale
        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        out[:, head] = weights @ values[head]
    return out
