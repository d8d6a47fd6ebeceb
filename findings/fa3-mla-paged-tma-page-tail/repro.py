"""FA3's absorbed-MLA path multiplies the unwritten tail of a request's last KV page into its output
once the query heads times the query tokens outgrow its query tile: 64 or more heads at page 64.

DeepSeek-V3 under DP attention (all 128 heads on one GPU) or Kimi-K2 (64) on --attention-backend fa3
--page-size 64, EAGLE/MTP verify. sglang's FlashAttentionBackend.forward_extend passes the latent and
rope parts apart (qv form) to sgl_kernel's flash_attn_with_kvcache with the page table. FA3 on sm90
loads paged K/V by TMA, whole pages, when the page size is a multiple of its key tile and
seqlen_q * (heads / kv_heads) exceeds its query tile (get_pagedkv_tma); cp.async otherwise, which
zero-fills rows past seqlen_k. On the TMA path those rows (the rest of the request's last page) get
P = 0, and 0 x NaN = NaN: a NaN or Inf left in that tail (by an earlier request; here the pool's
unwritten slots are NaN on purpose) reaches every query head. At 16 heads (TP8) the same verify passes.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a Hopper GPU)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (TOLERANCE, MlaPools, MlaShape, Problems, attend_absorbed, chain_verify_batch,  # noqa: E402
                            eagle_args, mla_layer, model_runner, normal, random_latent, server_state, verdict,
                            worst_error)

import torch  # noqa: E402

COMMITTED, STEPS, PAGE = [100, 37], 3, 64  # rows end at 104 and 41: mid-page, the rest of each page unwritten
DRAFT = STEPS + 1


def verify_error(num_heads: int, generator: torch.Generator) -> tuple[int, int, float]:
    """(NaN outputs, outputs, largest error over the finite ones) of one chain verify at ``num_heads``."""
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    shape = MlaShape(num_heads=num_heads, page_size=PAGE)
    with server_state(attention_backend="fa3", page_size=PAGE, **eagle_args(1, STEPS, DRAFT)) as args:
        pools = MlaPools(shape, [n + DRAFT for n in COMMITTED], args)
        for request, committed in enumerate(COMMITTED):  # the rest of each last page stays NaN
            random_latent(pools, request, range(committed + DRAFT), generator)
        backend = FlashAttentionBackend(model_runner(shape, pools, args))
        batch = chain_verify_batch(pools, COMMITTED, STEPS, host_mirrors=True)
        backend.init_forward_metadata(batch)
        q = normal(generator, len(COMMITTED) * DRAFT, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        rows = torch.cat([pools.keys(r, range(n, n + DRAFT))[0] for r, n in enumerate(COMMITTED)])
        out = attend_absorbed(backend, batch, mla_layer(shape), q, rows.to(shape.dtype), "fa3")
        seen = [(r, list(range(n + j + 1))) for r, n in enumerate(COMMITTED) for j in range(DRAFT)]
        nan = int(out.isnan().sum())
        return nan, out.numel(), float("nan") if nan else worst_error(out, q, pools, seen)


def main() -> int:
    generator = torch.Generator().manual_seed(0)
    problems = Problems()
    said = []
    for heads in (16, 128):  # DeepSeek-V3 at TP8, and under DP attention
        nan, total, worst = verify_error(heads, generator)
        said.append(f"{heads} heads: {nan} NaN of {total} outputs" + ("" if nan else f", within {worst:.2g}"))
        if nan or not worst <= TOLERANCE[torch.bfloat16]:
            problems.add(f"{said[-1]}: the unwritten slots past each row's end in its last page of {PAGE} reach "
                         "P @ V")
    return verdict(problems, "; ".join(said))


if __name__ == "__main__":
    sys.exit(main())
