"""Independent pure-torch attention: the oracle every backend is compared with.

It sees only the harness's own copy of Q/K/V and, per query, the list of row
positions the query may attend to (causal, tree or per-branch visibility as the
mode defines it). It never reads sglang's pools, indices or masks, so a bug in
how a backend gathers KV cannot leak into the expected answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Query:
    """One query token: which request it belongs to and what it may see."""

    request: int
    visible: tuple[int, ...]  # row positions in the request's token row


def reference_attention(q: torch.Tensor, queries: list[Query], row_k: list[torch.Tensor],
                        row_v: list[torch.Tensor], scale: float) -> torch.Tensor:
    """Attention in float64.

    q: [num_queries, num_heads, head_dim]; row_k / row_v: per request
    [row_len, num_kv_heads, head_dim] (positions never written may hold NaN:
    a correct visibility list never touches them). Returns float64
    [num_queries, num_heads, head_dim].
    """
    num_heads = q.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64)
    q64 = q.detach().to("cpu", torch.float64)
    for index, query in enumerate(queries):
        positions = torch.tensor(query.visible, dtype=torch.long)
        k = row_k[query.request][positions].to("cpu", torch.float64)
        v = row_v[query.request][positions].to("cpu", torch.float64)
        group = num_heads // k.shape[1]
        k = k.repeat_interleave(group, dim=1)  # GQA: query head h reads kv head h // group
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,khd->hk", q64[index], k) * scale
        out[index] = torch.einsum("hk,khd->hd", torch.softmax(scores, dim=-1), v)
    return out
