"""FA4 on sm90 multiplies the unwritten tail of a request's last KV page into its output.

FA4 (sglang's vendored flash_attn/cute) loads paged K/V by TMA when the page size equals its key tile,
else by cp.async. TMA loads whole pages, V rows past seqlen_k of the last page included; their scores
are masked to P = 0, but 0 x NaN = NaN, where cp.async zero-fills. Head dim 256 with a sliding window
makes the key tile 64, so page 64 takes TMA. A NaN or Inf in the unused tail of a request's last page
(left there by an earlier request, say; here the pool's unwritten slots are NaN on purpose) then
reaches the output.

An EAGLE chain verify (3 steps, 4 draft tokens) on FlashAttentionBackend with fa_impl_ver=4, bs 1,
committed 100 (the row ends at 104 of 128 in its second page), window 64 (HF), 4 query / 4 KV heads of
256, bf16, page 64.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a Hopper GPU)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (TOLERANCE, Pools, Problems, Shape, attend, chain_verify_batch, eagle_args,  # noqa: E402
                            in_window, layer, model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

COMMITTED, STEPS, WINDOW, PAGE = [100], 3, 64, 64
DRAFT = STEPS + 1


def main() -> int:
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    shape = Shape(num_heads=4, num_kv_heads=4, head_dim=256, context_len=4096, page_size=PAGE,
                  sliding_window=WINDOW - 1)
    generator = torch.Generator().manual_seed(0)
    with server_state(attention_backend="fa4", page_size=PAGE, **eagle_args(1, STEPS, DRAFT)) as args:
        pools = Pools(shape, [n + DRAFT for n in COMMITTED], args)
        random_kv(pools, 0, range(COMMITTED[0] + DRAFT), generator)  # the rest of the last page stays NaN
        backend = FlashAttentionBackend(model_runner(shape, pools, args), fa_impl_ver=4)
        batch = chain_verify_batch(pools, COMMITTED, STEPS, host_mirrors=True)
        backend.init_forward_metadata(batch)
        q = normal(generator, DRAFT, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        k, v = pools.keys(0, range(COMMITTED[0], COMMITTED[0] + DRAFT))
        out = attend(backend, batch, layer(shape), q, k.to(shape.dtype), v.to(shape.dtype))
        seen = [(0, in_window(COMMITTED[0] + j, range(COMMITTED[0] + j + 1), WINDOW)) for j in range(DRAFT)]
        worst = worst_error(out, q, pools, seen)
        problems = Problems()
        nan = int(out.isnan().sum())
        if nan or not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"{nan} NaN of {out.numel()} outputs, max error {worst:.3g} over the finite ones: the "
                         f"unwritten slots past the row's {COMMITTED[0] + DRAFT} tokens in its last page of {PAGE} "
                         "reach P @ V")
        return verdict(problems, f"no NaN, within {worst:.2g} of the reference")


if __name__ == "__main__":
    sys.exit(main())
