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
from torch.nn.utils.rnn import pad_sequence

from harness.base.transfers import to_device_together

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


def span_bounds(queries: list[Query | None]) -> torch.Tensor:
    """int64 [len(queries), widest span count, 2] on the host: each query's visible spans, padded with
    empty ones (None: a padding row that sees nothing)."""
    widest = max((len(q.spans) for q in queries if q is not None), default=0) or 1
    return torch.tensor([[*q.spans, *[(0, 0)] * (widest - len(q.spans))] if q is not None else [(0, 0)] * widest
                         for q in queries], dtype=torch.long)


def visibility_mask(bounds: torch.Tensor, row_len: int) -> torch.Tensor:
    """bool [queries, row_len] on the device of ``bounds`` (span_bounds): True where the query may see
    the row position."""
    position = torch.arange(row_len, device=bounds.device)
    inside = (position >= bounds[..., :1]) & (position < bounds[..., 1:])  # [queries, spans, row]
    return inside.any(dim=1)


def _chunks(lengths: dict[int, int], queries_of: dict[int, list[int]], group_bytes) -> list[list[int]]:
    """Requests grouped for one batched product each: longest rows first, so a group pads little,
    and each group's padded float64 K/V and scores (``group_bytes(requests, keys, queries)``) kept
    under SCORE_CHUNK_BYTES; one request alone may exceed it, its queries are then taken in slices."""
    groups: list[list[int]] = []
    for request in sorted(lengths, key=lengths.get, reverse=True):
        if groups:
            group = groups[-1]
            widest = max(len(queries_of[r]) for r in (*group, request))
            if group_bytes(len(group) + 1, lengths[group[0]], widest) <= SCORE_CHUNK_BYTES:
                group.append(request)
                continue
        groups.append([request])
    return groups


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor,
            scale: float) -> torch.Tensor:
    """q [R, n, H, D], k/v [R, L, Hkv, D] (float64, NaN where unwritten), visible [R, n, L]
    -> [R, n, H, D] float64; a query that may see an unwritten key comes out NaN."""
    requests, n, num_heads, head_dim = q.shape
    kv_heads = k.shape[2]
    group = num_heads // kv_heads  # GQA: query head h reads kv head h // group
    unwritten = torch.isnan(k).flatten(2).any(dim=2) | torch.isnan(v).flatten(2).any(dim=2)  # [R, L]
    k = torch.where(unwritten[..., None, None], 0.0, k)
    v = torch.where(unwritten[..., None, None], 0.0, v)
    per_slice = max(1, SCORE_CHUNK_BYTES // max(1, 8 * requests * num_heads * k.shape[1]))
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for start in range(0, n, per_slice):
        rows = slice(start, start + per_slice)
        q_rows = q[:, rows].reshape(requests, -1, kv_heads, group, head_dim)
        scores = torch.einsum("rnkgd,rlkd->rkgnl", q_rows, k) * scale
        scores = scores.masked_fill(~visible[:, None, None, rows], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        part = torch.einsum("rkgnl,rlkd->rnkgd", weights, v).reshape(requests, -1, num_heads, head_dim)
        reads_unwritten = (visible[:, rows] & unwritten[:, None, :]).any(dim=2)  # [R, n]
        out[:, rows] = torch.where(reads_unwritten[..., None, None], float("nan"), part)
    return out


def reference_attention(q: torch.Tensor, queries: list[Query], row_k: list[torch.Tensor],
                        row_v: list[torch.Tensor], scale: float) -> torch.Tensor:
    """Attention in float64, on the device of ``row_k``.

    q: [num_queries, num_heads, head_dim]; row_k / row_v: per request
    [row_len, num_kv_heads, head_dim] (positions never written may hold NaN:
    a correct visibility never touches them). Returns float64
    [num_queries, num_heads, head_dim] on that device. Requests are computed a group at a time,
    each group's rows padded to its longest (padding is never visible), so the kernel launches per
    forward grow with the groups, not with the requests.
    """
    device = row_k[0].device if row_k else q.device
    q64 = q.detach().to(device, torch.float64)
    out = torch.empty(q64.shape, dtype=torch.float64, device=device)
    queries_of: dict[int, list[int]] = {}
    for index, query in enumerate(queries):
        queries_of.setdefault(query.request, []).append(index)
    lengths = {request: row_k[request].shape[0] for request in queries_of}
    _, num_heads, head_dim = q64.shape
    kv_width = 2 * row_k[0].shape[1] * head_dim if row_k else 0  # K and V values per key

    def group_bytes(requests: int, keys: int, queries: int) -> int:
        return 8 * requests * keys * (num_heads * queries + kv_width)

    for group in _chunks(lengths, queries_of, group_bytes):
        widest = max(len(queries_of[r]) for r in group)
        padded = torch.tensor([[*queries_of[r], *[-1] * (widest - len(queries_of[r]))] for r in group])
        real = padded >= 0  # [R, n]: query rows, -1 for padding
        # what the group reads, built on the host and moved in one copy (a mask index would wait on the GPU)
        rows, targets, sources, bounds = to_device_together(
            device, padded.clamp(min=0), padded[real], real.flatten().nonzero().flatten(),
            span_bounds([queries[i] if i >= 0 else None for i in padded.flatten().tolist()]))
        k = pad_sequence([row_k[r] for r in group], batch_first=True).to(torch.float64)
        v = pad_sequence([row_v[r] for r in group], batch_first=True).to(torch.float64)
        visible = visibility_mask(bounds, k.shape[1]).view(len(group), widest, -1)
        found = _attend(q64[rows], k, v, visible, scale)
        out[targets] = found.reshape(-1, num_heads, head_dim)[sources]
    return out


def clipped(query: Query, start: int, end: int) -> Query:
    """The query's visible positions inside [start, end)."""
    spans = tuple((max(a, start), min(b, end)) for a, b in query.spans if min(b, end) > max(a, start))
    return Query(query.request, spans)


def _visible_count(query: Query) -> int:
    return sum(end - start for start, end in query.spans)


SPLITS = ("any", "prefix|new", "page|rest")  # how a kernel may part a query's keys (backends.PartialMerge)


def census_parts(queries: list[Query], prefix_lens: list[int], row_k: list[torch.Tensor],
                 row_v: list[torch.Tensor], kv_head: int, page_size: int = 1,
                 splits: tuple[str, ...] = SPLITS) -> dict[str, torch.Tensor]:
    """What partial-merge rounding in the key-census head is proportional to (harness/checks/compare.py
    HALF_ULP), per query and element, for each of ``splits``: float64 [queries, head_dim], from the
    same float64 attention with q = 0 (uniform weights: plain means over each part).

    "any": the mean |V| over the visible keys, which bounds sum_i w_i |p_i| for every split;
    "prefix|new": w |p| summed over the committed prefix and the rest; "page|rest": the same cut at
    the prefix's last page boundary (FA3's paged tree draft decode).
    """
    k = [row[:, kv_head:kv_head + 1] for row in row_k]
    v = [row[:, kv_head:kv_head + 1] for row in row_v]
    device = k[0].device
    zero = torch.zeros(len(queries), 1, k[0].shape[-1], dtype=torch.float64, device=device)

    def mean_over(subset: list[Query], values) -> torch.Tensor:
        return reference_attention(zero, subset, k, values, 1.0)[:, 0]

    total = torch.tensor([_visible_count(q) for q in queries], dtype=torch.float64)

    def two_parts(cuts: list[int]) -> torch.Tensor:
        """sum over the parts [0, cut) and [cut, ...) of each query's request of w |p|."""
        magnitude = torch.zeros_like(zero[:, 0])
        for part in ([clipped(q, 0, cuts[q.request]) for q in queries],
                     [clipped(q, cuts[q.request], 1 << 62) for q in queries]):
            counts = [_visible_count(q) for q in part]
            if any(counts):  # decided on the host: asking the device would wait on it
                share = (torch.tensor(counts, dtype=torch.float64) / total).to(device)
                magnitude += torch.where(share[:, None] > 0, share[:, None] * mean_over(part, v).abs(), 0.0)
        return magnitude

    cuts = {"prefix|new": list(prefix_lens), "page|rest": [p - p % page_size for p in prefix_lens]}
    found: dict[str, torch.Tensor] = {}
    for split in splits:
        if split == "any":
            found[split] = mean_over(queries, [row.abs() for row in v])
        else:
            twin = next((done for done in found if cuts.get(done) == cuts[split]), None)
            found[split] = found[twin] if twin else two_parts(cuts[split])
    return found
