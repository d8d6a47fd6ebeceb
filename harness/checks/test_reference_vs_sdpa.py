"""The torch oracle against torch's own scaled_dot_product_attention (float64, CPU).

If the reference were wrong, every cell would be compared with a wrong answer;
these cases pin it to an implementation the harness did not write: causal
windows, arbitrary per-query visibility (tree masks), GQA and MHA, and rows
holding NaN where no query may look.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.checks.reference import Query, reference_attention, spans_of

HEAD_DIM = 16


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float):
    """q: [n, H, D] of one request; k/v: [L, Hkv, D]; visible: bool [n, L]."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=visible,
        scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return out.transpose(0, 1)


def draw(n: int, heads: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(n, heads, HEAD_DIM, generator=gen, dtype=torch.float64)


def check(queries: list[Query], row_lens: list[int], num_heads: int, num_kv_heads: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = draw(len(queries), num_heads, gen)
    row_k = [draw(n, num_kv_heads, gen) for n in row_lens]
    row_v = [draw(n, num_kv_heads, gen) for n in row_lens]
    scale = HEAD_DIM ** -0.5
    got = reference_attention(q, queries, row_k, row_v, scale)
    for request, length in enumerate(row_lens):
        rows = [i for i, query in enumerate(queries) if query.request == request]
        visible = torch.zeros(len(rows), length, dtype=torch.bool)
        for index, row in enumerate(rows):
            visible[index, list(queries[row].positions())] = True
        want = sdpa(q[rows], row_k[request], row_v[request], visible, scale)
        torch.testing.assert_close(got[rows], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (4, 2), (8, 1)], ids=["mha", "gqa2", "mqa"])
def test_causal_window_after_a_prefix(num_heads, num_kv_heads):
    prefix, window = 9, 4
    queries = [Query(0, spans_of(range(prefix + t + 1))) for t in range(window)]
    check(queries, [prefix + window], num_heads, num_kv_heads)


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (6, 2)], ids=["mha", "gqa3"])
def test_arbitrary_visibility_across_requests(num_heads, num_kv_heads):
    gen = torch.Generator().manual_seed(3)
    row_lens = [12, 5, 20]
    queries = []
    for request, length in enumerate(row_lens):
        for _ in range(4):
            picked = torch.nonzero(torch.rand(length, generator=gen) < 0.5).flatten().tolist() or [0]
            queries.append(Query(request, spans_of(*picked)))
    check(queries, row_lens, num_heads, num_kv_heads, seed=5)


def test_tree_mask_ancestors_and_self():
    """A topk-2 tree after a 3-token prefix: parents [-1, 0, 0, 1, 2]."""
    prefix, ancestors = 3, [(0,), (0, 1), (0, 2), (0, 1, 3), (0, 2, 4)]
    queries = [Query(0, spans_of(range(prefix), *(prefix + a for a in chain))) for chain in ancestors]
    check(queries, [prefix + len(ancestors)], 4, 2)


def test_positions_no_query_sees_may_hold_nan():
    gen = torch.Generator().manual_seed(1)
    q, k, v = draw(2, 2, gen), draw(6, 1, gen), draw(6, 1, gen)
    poisoned_k, poisoned_v = k.clone(), v.clone()
    poisoned_k[4:], poisoned_v[4:] = float("nan"), float("nan")
    queries = [Query(0, spans_of(0, 1, 2)), Query(0, spans_of(0, 3))]
    clean = reference_attention(q, queries, [k], [v], 0.25)
    poisoned = reference_attention(q, queries, [poisoned_k], [poisoned_v], 0.25)
    assert torch.equal(clean, poisoned)


def against_mask(queries: list[Query], row_len: int, mask: torch.Tensor, num_heads: int = 4, num_kv_heads: int = 2):
    """The reference on the modes' own visibility lists against SDPA given ``mask``, built here apart."""
    gen = torch.Generator().manual_seed(7)
    q = draw(len(queries), num_heads, gen)
    k, v = draw(row_len, num_kv_heads, gen), draw(row_len, num_kv_heads, gen)
    scale = HEAD_DIM ** -0.5
    got = reference_attention(q, queries, [k], [v], scale)
    torch.testing.assert_close(got, sdpa(q, k, v, mask, scale), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("window", [2, 5, 9, 40])
def test_sliding_window_chain_is_a_band(window):
    """Draft extend of 6 tokens after 9: a query at position p attends keys p - window < k <= p."""
    from harness.case.cases import spec_from_fields
    from harness.modes import DRAFT_EXTEND_V2

    case = spec_from_fields(dict(name="band", bs=1, prefix_lens=[9], input_lens=6, sliding_window=window))
    (step,) = DRAFT_EXTEND_V2.steps(case)
    query = torch.arange(9, 15)[:, None]
    key = torch.arange(15)[None, :]
    against_mask(step.queries, 15, (key <= query) & (query - key < window))


@pytest.mark.parametrize("window", [2, 3, 6])
def test_sliding_window_tree_is_a_band_over_depth(window, monkeypatch):
    """Tree [-1, 0, 0, 1, 2] after 4 tokens: ancestors-and-self, within the window counted on
    positions (prefix + depth), not rows."""
    from harness.case.cases import spec_from_fields
    from harness.modes import TARGET_VERIFY, target_verify

    parents = [-1, 0, 0, 1, 2]
    monkeypatch.setattr(target_verify, "draft_tree", lambda case, request: parents)
    case = spec_from_fields(dict(name="tree", bs=1, prefix_lens=[4], topk=2, input_lens=5, sliding_window=window))
    (step,) = TARGET_VERIFY.steps(case)
    depth = torch.tensor([0, 1, 1, 2, 2])
    position = torch.cat([torch.arange(4), 4 + depth])  # of each row: prefix, then the nodes
    ancestor = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]])
    seen = torch.cat([torch.ones(5, 4, dtype=torch.bool), ancestor.bool()], dim=1)
    in_window = position[4:, None] - position[None, :] < window
    against_mask(step.queries, 9, seen & in_window)
