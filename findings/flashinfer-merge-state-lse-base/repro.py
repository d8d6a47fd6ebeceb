"""FlashInfer's extend merges its two partial results in the wrong log base above 8192 / head_dim heads.

An extend over a prefix (chunked prefill after the first chunk, a prefix-cache hit, EAGLE's draft
extend): FlashInferAttnBackend.forward_extend attends the new tokens to themselves (ragged wrapper)
and to the prefix (paged wrapper) and merges the two with _safe_merge_state. FlashInfer returns base-2
log-sum-exps. Up to 1024 / (head_dim / vec_size) query heads (32 at head_dim 256, 64 at head_dim 128, in
16-bit dtypes) the merge is FlashInfer's merge_state, in base 2; above that it is sglang's
merge_state_triton, which works in natural logs, so each part gets the wrong weight wherever both
hold keys.

The same extend (bs 1, prefix 3, 57 new tokens, head_dim 256, 8 KV heads, bf16) at 64 query heads
(Triton's merge) and, as the control, at 32 (FlashInfer's merge). No speculative decoding needed.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (TOLERANCE, Pools, Problems, Shape, attend, extend_batch, layer,  # noqa: E402
                            model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

PREFIX, EXTEND = [3], [57]


def run(num_heads: int, problems: Problems) -> str:
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    shape = Shape(num_heads=num_heads, num_kv_heads=8, head_dim=256, context_len=4096)
    generator = torch.Generator().manual_seed(num_heads)
    with server_state(attention_backend="flashinfer", page_size=1) as args:
        pools = Pools(shape, [p + e for p, e in zip(PREFIX, EXTEND)], args)
        random_kv(pools, 0, range(PREFIX[0] + EXTEND[0]), generator)
        backend = FlashInferAttnBackend(model_runner(shape, pools, args, algorithm=None))
        batch = extend_batch(pools, PREFIX, EXTEND)
        backend.init_forward_metadata(batch)
        q = normal(generator, EXTEND[0], shape.num_heads, shape.head_dim, dtype=shape.dtype)
        k, v = pools.keys(0, range(PREFIX[0], PREFIX[0] + EXTEND[0]))
        out = attend(backend, batch, layer(shape), q, k.to(shape.dtype), v.to(shape.dtype))
        worst = worst_error(out, q, pools, [(0, list(range(PREFIX[0] + j + 1))) for j in range(EXTEND[0])])
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"{num_heads} query heads of {shape.head_dim}: output differs from the float64 reference "
                         f"by {worst:.3g} (tolerance {TOLERANCE[shape.dtype]})")
        return f"{num_heads} heads within {worst:.2g}"


def main() -> int:
    problems = Problems()
    ok = [run(heads, problems) for heads in (64, 32)]
    return verdict(problems, "; ".join(ok))


if __name__ == "__main__":
    sys.exit(main())
