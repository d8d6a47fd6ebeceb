"""The census allowance for kernels that merge partial outputs (harness/checks/compare.py HALF_ULP), in pure torch.

A cascade kernel (sglang's FA3/FA4 tree verify, FlashInfer's ragged+paged draft extend) attends the
committed prefix and the query's new keys separately, stores each part's output in bf16, and merges
them by LSE. With few keys the rounding of a part is as large as V itself: the plain census bound
fails such a correct kernel. The allowance (each part's half ulp, weighted by its share of keys)
must pass every such draw, and one wrong, missing or extra key among 257 must still fail.
"""

from __future__ import annotations

import pytest
import torch

from harness.checks.compare import HALF_ULP, compare
from harness.checks.reference import Query, census_parts, reference_attention, spans_of
from harness.checks.test_key_census import HEAD_DIM, HEADS, KV_HEADS, SCALE, SWAP, flash_like

WINDOW = 4


def cascade_case(prefix: int, seed: int):
    """A chain window of 4 after ``prefix`` committed keys, q = 0 in the census head."""
    gen = torch.Generator().manual_seed(seed)
    keys = prefix + WINDOW + 8
    k = torch.randn(keys, KV_HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    v = torch.randn(keys, KV_HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    q = torch.randn(WINDOW, HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    q[:, -1] = 0
    queries = [Query(0, spans_of(range(prefix + j + 1))) for j in range(WINDOW)]
    return q, k, v, queries, reference_attention(q, queries, [k], [v], SCALE)


def cascade(q, k, v, queries, prefix: int, attended=SWAP["right set"], parts_of=None):
    """Each query attended in two parts, each part's output stored in bf16, merged in fp32."""
    outs = []
    for j, query in enumerate(queries):
        seen = torch.tensor(attended(list(query.positions())))
        split = parts_of(seen) if parts_of else [seen[seen < prefix], seen[seen >= prefix]]
        picked = [part for part in split if len(part)]
        outs.append(flash_like(q[j], k, v, torch.bfloat16, partial=torch.bfloat16,
                               parts=[part.tolist() for part in picked]))
    return torch.stack(outs)


def slack(queries, prefix: int, k, v, split: str) -> torch.Tensor:
    return HALF_ULP["bfloat16"] * census_parts(queries, [prefix], [k], [v], KV_HEADS - 1, splits=(split,))[split]


def labels() -> list[str]:
    return [f"draft token {j}" for j in range(WINDOW)]


def test_a_correct_cascade_fails_the_plain_bound_but_passes_with_the_allowance():
    plain_failures = 0
    for seed in range(100):
        prefix = 1 + seed % 3
        q, k, v, queries, expected = cascade_case(prefix, seed)
        out = cascade(q, k, v, queries, prefix)
        plain = compare(out, expected, "bfloat16", labels())
        plain_failures += not plain.ok
        allowed = compare(out, expected, "bfloat16", labels(), slack(queries, prefix, k, v, "prefix|new"))
        assert allowed.ok, f"seed {seed}: {allowed.describe()}"
    assert plain_failures, "no draw needed the allowance: the test does not show what it claims"


def in_chunks(size: int):
    return lambda seen: list(seen.split(size))


@pytest.mark.parametrize("split,parts_of", [("prefix|new", None), ("any", in_chunks(64))],
                         ids=["cascade", "split-kv in 64-key chunks"])
@pytest.mark.parametrize("fault", ["one wrong key", "one missing key", "one extra key"])
@pytest.mark.parametrize("seed", range(10))
def test_one_key_off_among_257_still_fails_with_the_allowance(split, parts_of, fault, seed):
    prefix = 253
    q, k, v, queries, expected = cascade_case(prefix, seed)
    out = cascade(q, k, v, queries, prefix, SWAP[fault], parts_of)
    found = compare(out, expected, "bfloat16", labels(), slack(queries, prefix, k, v, split))
    assert not found.ok and found.census_mismatch_frac > 0, found.describe()


@pytest.mark.parametrize("seed", range(10))
def test_the_any_split_allowance_passes_split_kv_with_bf16_partials(seed):
    prefix = 253
    q, k, v, queries, expected = cascade_case(prefix, seed)
    out = cascade(q, k, v, queries, prefix, parts_of=in_chunks(64))
    found = compare(out, expected, "bfloat16", labels(), slack(queries, prefix, k, v, "any"))
    assert found.ok, found.describe()


def test_the_declared_merges_answer_for_every_cell_of_the_matrix():
    """Every backend's PartialMerge predicates run on every cell (no GPU needed to ask), and the
    cascade paths are where sglang's source puts them: FA3/FA4 tree verify, not chain verify."""
    from harness.families import BACKENDS
    from harness.case.cases import load_all_cases
    from harness.cell.cell_matrix import expand_cells
    from harness.runners import RUNNER_FORMS

    splits = {}
    for cell in expand_cells(load_all_cases()):
        split = BACKENDS[cell.backend].partial_split(cell.case.mode, cell.case.spec, RUNNER_FORMS[cell.runner].graph)
        splits[cell.cell_id] = split
    assert splits["target_verify-tree-bs3-dtypebfloat16-fa3-eager"] == "prefix|new"
    assert splits["target_verify-chain-bs2-dtypebfloat16-fa3-eager"] is None
    assert splits["draft_extend_v2-window4-bs2-dtypebfloat16-flashinfer-eager"] == "prefix|new"


def test_a_cut_at_the_page_boundary_is_its_own_split():
    """prefix 5 on pages of 4: FA3's paged draft decode attends rows 0..3 apart from row 4 (the tail)
    and the branch; the page|rest magnitudes are those of that cut, not of the prefix|new cut."""
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(8, KV_HEADS, HEAD_DIM, generator=gen, dtype=torch.float64)
    queries = [Query(0, spans_of(range(5), 6))]
    parts = census_parts(queries, [5], [v.clone()], [v], KV_HEADS - 1, page_size=4)
    head = v[:, KV_HEADS - 1]
    torch.testing.assert_close(parts["page|rest"][0], (4 / 6) * head[:4].mean(0).abs() + (2 / 6) * head[[4, 6]].mean(0).abs())
    torch.testing.assert_close(parts["prefix|new"][0], (5 / 6) * head[:5].mean(0).abs() + (1 / 6) * head[6].abs())
