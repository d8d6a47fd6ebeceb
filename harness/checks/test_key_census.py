"""The key census, proven in pure torch: one wrong, missing or extra key among 257 fails; the right
set passes, even with the rounding a real kernel adds (bf16/fp16 outputs and split-KV partials, tf32).

The "kernel" here is FlashAttention's arithmetic written out: scores and softmax
in fp32, P rounded to the input dtype for the PV product, fp32 accumulation,
optional KV splits whose normalised partial outputs are stored in a chosen
dtype and merged by log-sum-exp, and the output rounded to the input dtype.
"""

from __future__ import annotations

import pytest
import torch

from harness.checks.compare import compare
from harness.checks.reference import Query, reference_attention, spans_of

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
PREFIX, WINDOW = 253, 4  # the last window token attends 257 keys
SCALE = HEAD_DIM ** -0.5


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> tf32 (10 mantissa bits, round to nearest), as GPU dots read fp32 inputs."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def flash_like(q, k, v, dtype: torch.dtype, splits: int = 1, partial=torch.float32, tf32=False, parts=None):
    """One query's attention as a kernel computes it. q: [H, D]; k/v: [n, Hkv, D] (already dtype).
    ``parts``: the key index sets attended separately (default: ``splits`` equal chunks)."""
    group = HEADS // KV_HEADS
    k32 = k.float().repeat_interleave(group, dim=1)
    v32 = v.float().repeat_interleave(group, dim=1)
    if tf32:
        k32, v32 = round_tf32(k32), round_tf32(v32)
    outs, lses = [], []
    for chunk in parts or torch.arange(k.shape[0]).chunk(splits):
        s = torch.einsum("hd,khd->hk", q.float(), k32[chunk]) * SCALE
        m = s.max(dim=-1, keepdim=True).values
        p = torch.exp(s - m)
        acc = torch.einsum("hk,khd->hd", p.to(dtype).float() if not tf32 else round_tf32(p), v32[chunk])
        total = p.sum(dim=-1, keepdim=True)
        outs.append((acc / total).to(partial).float())
        lses.append(m + torch.log(total))
    lse = torch.logsumexp(torch.stack(lses), dim=0)
    merged = sum(torch.exp(part_lse - lse) * out for part_lse, out in zip(lses, outs))
    return merged.to(dtype)


def window_case(dtype: torch.dtype, seed: int = 0):
    """A verify window after a 253-token prefix: token j sees 254 + j keys; spare keys follow."""
    gen = torch.Generator().manual_seed(seed)
    keys = PREFIX + WINDOW + 8
    k = torch.randn(keys, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
    v = torch.randn(keys, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
    q = torch.randn(WINDOW, HEADS, HEAD_DIM, generator=gen).to(dtype)
    q[:, -1] = 0  # the key-census head, as harness/fixtures/pools.py draws it
    queries = [Query(0, spans_of(range(PREFIX + j + 1))) for j in range(WINDOW)]
    expected = reference_attention(q, queries, [k], [v], SCALE)
    return q, k, v, queries, expected


SWAP = {"right set": lambda seen: seen,
        "one wrong key": lambda seen: [*seen[:100], PREFIX + WINDOW + 3, *seen[101:]],
        "one missing key": lambda seen: [*seen[:100], *seen[101:]],
        "one extra key": lambda seen: [*seen, PREFIX + WINDOW + 3]}


def run(dtype: torch.dtype, attended, seed: int = 0, **kernel):
    q, k, v, queries, expected = window_case(dtype, seed)
    out = torch.stack([flash_like(q[j], k[attended(list(query.positions()))], v[attended(list(query.positions()))],
                                  dtype, **kernel)
                       for j, query in enumerate(queries)])
    labels = [f"draft token {j}" for j in range(WINDOW)]
    return compare(out, expected, str(dtype).removeprefix("torch."), labels)


KERNELS = {  # dtype, kernel arithmetic
    "bf16": (torch.bfloat16, {}),
    "bf16 8 splits, bf16 partials": (torch.bfloat16, dict(splits=8, partial=torch.bfloat16)),
    "fp16 8 splits, fp16 partials": (torch.float16, dict(splits=8, partial=torch.float16)),
    "fp32 tf32 dots, 4 splits": (torch.float32, dict(splits=4, tf32=True)),
}


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_right_set_passes(kernel):
    dtype, arithmetic = KERNELS[kernel]
    found = run(dtype, SWAP["right set"], **arithmetic)
    assert found.ok, found.describe()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fault", ["one wrong key", "one missing key", "one extra key"])
def test_one_key_off_fails_in_the_census_head(kernel, fault):
    dtype, arithmetic = KERNELS[kernel]
    found = run(dtype, SWAP[fault], **arithmetic)
    assert not found.ok and found.census_mismatch_frac > 0, found.describe()


@pytest.mark.parametrize("seed", range(20))
def test_census_catches_one_wrong_key_whatever_the_draw(seed):
    """Scored heads see a wrong key only through its softmax weight, which the draw decides;
    the census head sees it at 1/n of |V_a - V_b| every time."""
    found = run(torch.bfloat16, SWAP["one wrong key"], seed=seed)
    assert found.census_mismatch_frac > 0, found.describe()


def test_every_draw_zeroes_q_in_the_census_head_and_expects_the_mean_of_v():
    """harness/fixtures/pools.py (draw_inputs): the census head of each forward's Q is 0; its reference is the
    plain mean of V over what each query sees."""
    from types import SimpleNamespace

    from harness.case.cases import spec_from_fields
    from harness.fixtures.pools import draw_inputs
    from harness.modes import TARGET_VERIFY

    spec = spec_from_fields(dict(name="census", bs=2, prefix_lens=[5, 3], input_lens=4, num_heads=4, num_kv_heads=2))
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(n, 2, 64, generator=gen, dtype=torch.float32) for n in TARGET_VERIFY.row_lens(spec)]
    state = SimpleNamespace(spec=spec, device="cpu", row_k=rows, row_v=[r.clone() for r in rows],
                            randn=lambda *shape: torch.randn(*shape, generator=gen),
                            record_new_kv=lambda writes, k, v: None)
    steps = TARGET_VERIFY.steps(spec)
    (drawn,) = draw_inputs(state, steps, scale=0.125)
    q = drawn.q.view(-1, 4, 64)
    assert bool((q[:, 3] == 0).all()) and bool((q[:, :3] != 0).any(dim=-1).all())
    for row, query in enumerate(steps[0].queries):
        mean = state.row_v[query.request][list(query.positions()), 1].double().mean(dim=0)
        torch.testing.assert_close(drawn.expected[row, 3], mean)
