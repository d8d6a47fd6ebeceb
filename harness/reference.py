"""Independent pure-torch attention: the oracle every backend is compared with.

It sees only the harness's own copy of Q/K/V and, per query, the row positions the query may
attend to (causal, tree or per-branch visibility as the mode defines it). It never reads
sglang's pools, indices or masks, so a bug in how a backend gathers KV cannot leak into the
expected answer.

The maths is float64 softmax(q k^T * scale) v over exactly the visible keys. It runs on the
device the K/V live on (the cell's), one request at a time: all of a request's queries and heads
in one batched product over the request's row, with the keys a query may not see masked out.
Masked keys get probability 0 (their scores are replaced, never added to), and a visible key
whose K or V was never written (NaN in the harness copy) makes that query's output NaN, as
reading it one key at a time would.
"""

from __future__ import annotations

from dataclasses import dataclass
import torch

# Scores of one chunk of a request's queries ([kv_heads, group, queries, row_len] float64) are
# kept under this many bytes: a 128k-token row with 64 heads stays within a few hundred MiB.
SCORE_CHUNK_BYTES = 256 << 20


@dataclass(frozen=True)
class Query:
    """One query token: its request, and the row positions it may see as half-open spans."""

    request: int
    spans: tuple[tuple[int, int], ...]  # sorted, disjoint [start, end) ranges of row positions

    def positions(self) -> tuple[int, ...]:
        """Every visible row position, in order (for tests and messages; the reference uses spans)."""
        return tuple(p for start, end in self.spans for p in range(start, end))


def spans_of(*parts: range | int) -> tuple[tuple[int, int], ...]:
    """Visible row positions as merged spans: ``spans_of(range(prefix), prefix + 2)``.

    Parts are step-1 ranges or single positions, in any order; overlapping and adjacent ones
    merge, so a causal window is one span however it was written.
    """
    pieces = sorted((p.start, p.stop) if isinstance(p, range) else (p, p + 1) for p in parts)
    merged: list[list[int]] = []
    for start, end in pieces:
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((start, end) for start, end in merged)


def visibility_mask(queries: list[Query], row_len: int, device) -> torch.Tensor:
    """bool [len(queries), row_len]: True where the query may see the row position."""
    widest = max(len(q.spans) for q in queries)
    bounds = torch.zeros(len(queries), widest, 2, dtype=torch.long)
    for index, query in enumerate(queries):
        if query.spans:
            bounds[index, : len(query.spans)] = torch.tensor(query.spans)
    bounds = bounds.to(device)
    position = torch.arange(row_len, device=device)
    inside = (position >= bounds[..., :1]) & (position < bounds[..., 1:])  # [queries, spans, row]
    return inside.any(dim=1)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor,
            scale: float) -> torch.Tensor:
    """q [n, H, D], k/v [L, Hkv, D] (float64), visible [n, L] -> [n, H, D] float64."""
    n, num_heads, head_dim = q.shape
    kv_heads = k.shape[1]
    group = num_heads // kv_heads  # GQA: query head h reads kv head h // group
    unwritten = torch.isnan(k).flatten(1).any(dim=1) | torch.isnan(v).flatten(1).any(dim=1)
    k = torch.where(unwritten[:, None, None], 0.0, k)
    v = torch.where(unwritten[:, None, None], 0.0, v)
    per_query = SCORE_CHUNK_BYTES // max(1, 8 * num_heads * k.shape[0])
    out = torch.empty(n, num_heads, head_dim, dtype=torch.float64, device=q.device)
    for start in range(0, n, max(1, per_query)):
        rows = slice(start, start + max(1, per_query))
        q_rows = q[rows].reshape(-1, kv_heads, group, head_dim)
        scores = torch.einsum("nkgd,lkd->kgnl", q_rows, k) * scale
        scores = scores.masked_fill(~visible[rows], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        chunk = torch.einsum("kgnl,lkd->nkgd", weights, v).reshape(-1, num_heads, head_dim)
        reads_unwritten = (visible[rows] & unwritten).any(dim=1)
        out[rows] = torch.where(reads_unwritten[:, None, None], float("nan"), chunk)
    return out


def reference_attention(q: torch.Tensor, queries: list[Query], row_k: list[torch.Tensor],
                        row_v: list[torch.Tensor], scale: float) -> torch.Tensor:
    """Attention in float64, on the device of ``row_k``.

    q: [num_queries, num_heads, head_dim]; row_k / row_v: per request
    [row_len, num_kv_heads, head_dim] (positions never written may hold NaN:
    a correct visibility never touches them). Returns float64
    [num_queries, num_heads, head_dim] on that device.
    """
    device = row_k[0].device if row_k else q.device
    q64 = q.detach().to(device, torch.float64)
    out = torch.empty(q64.shape, dtype=torch.float64, device=device)
    by_request: dict[int, list[int]] = {}
    for index, query in enumerate(queries):
        by_request.setdefault(query.request, []).append(index)
    for request, indices in by_request.items():
        rows = torch.tensor(indices, device=device)
        k, v = row_k[request].to(torch.float64), row_v[request].to(torch.float64)
        visible = visibility_mask([queries[i] for i in indices], k.shape[0], device)
        out[rows] = _attend(q64[rows], k, v, visible, scale)
    return out

