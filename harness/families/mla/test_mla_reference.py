"""The MLA oracle checked against the attention before absorption, and its visibility and poisoning.

The absorbed form (harness/families/mla/reference.py) must give, after the model's W_UV, what each
head computes with its own keys and values expanded from the latent: that is the algebra the oracle
rests on, checked here on small random shapes in float64 with random masks, against ``unabsorbed``
(a per-head loop over explicit K and V, no shared code with the oracle but the visibility spans).
"""

from __future__ import annotations

import pytest
import torch

from harness.checks.reference import Query, span_bounds, spans_of, visibility_mask
from harness.families.mla.reference import mla_reference, unabsorbed

HEADS, NOPE, ROPE, RANK, V_DIM = 3, 16, 8, 24, 12


def _draw(seed: int, row_len: int, queries: int):
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    return (randn(queries, HEADS, NOPE), randn(queries, HEADS, ROPE), randn(row_len, RANK), randn(row_len, ROPE),
            randn(HEADS, NOPE, RANK), randn(HEADS, RANK, V_DIM))


def _queries(seed: int, row_len: int, count: int) -> list[Query]:
    """Random non-empty visible sets: a prefix and a few scattered positions, as trees see them."""
    gen = torch.Generator().manual_seed(seed + 1)
    found = []
    for _ in range(count):
        prefix = int(torch.randint(1, row_len, (1,), generator=gen))
        extra = torch.randint(0, row_len, (3,), generator=gen).tolist()
        found.append(Query(0, spans_of(range(prefix), *extra)))
    return found


@pytest.mark.parametrize("seed", range(4))
def test_absorbed_oracle_matches_the_unabsorbed_attention(seed):
    row_len, count, scale = 29, 7, 0.37
    q_nope, q_pe, latent, rope_key, w_uk, w_uv = _draw(seed, row_len, count)
    queries = _queries(seed, row_len, count)
    q_latent = torch.einsum("nhd,hdr->nhr", q_nope, w_uk)  # the model's absorption of W_UK into q
    cache = torch.cat([latent, rope_key], dim=1)[:, None]
    absorbed = mla_reference(torch.cat([q_latent, q_pe], dim=2), queries, [cache], RANK, scale)
    visible = visibility_mask(span_bounds(queries), row_len)
    want = unabsorbed(q_nope, q_pe, latent, rope_key, w_uk, w_uv, visible, scale)
    got = torch.einsum("nhr,hrv->nhv", absorbed, w_uv)  # the model's W_UV after attention
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_a_visible_unwritten_row_poisons_only_its_readers():
    row_len = 10
    _, q_pe, latent, rope_key, _, _ = _draw(0, row_len, 2)
    cache = torch.cat([latent, rope_key], dim=1)[:, None].clone()
    cache[7] = float("nan")
    q = torch.randn(2, HEADS, RANK + ROPE, dtype=torch.float64)
    out = mla_reference(q, [Query(0, spans_of(range(7))), Query(0, spans_of(range(8)))], [cache], RANK, 0.5)
    assert not out[0].isnan().any() and out[1].isnan().all()


def test_a_hidden_key_gets_no_weight():
    """Changing a key the query may not see leaves the answer bit for bit."""
    row_len = 12
    _, _, latent, rope_key, _, _ = _draw(1, row_len, 1)
    cache = torch.cat([latent, rope_key], dim=1)[:, None]
    q = torch.randn(1, HEADS, RANK + ROPE, dtype=torch.float64)
    query = [Query(0, spans_of(range(5), 9))]
    moved = cache.clone()
    moved[6] += 100.0
    assert torch.equal(mla_reference(q, query, [cache], RANK, 0.5), mla_reference(q, query, [moved], RANK, 0.5))
