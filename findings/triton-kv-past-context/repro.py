"""TritonAttnBackend sizes its GPU-only verify kv_indices by the model context; a verify at the context
wall writes past them.

Two requests, each at the longest committed length sglang 0.5.22+ runs an EAGLE verify on for a
model of 4096 tokens and 5-step chains (6 draft tokens): 4096 - 5 + 6 = 4097 tokens. On the GPU-only
path (Triton declares needs_cpu_seq_lens = False, so the scheduler publishes no seq_lens_cpu /
seq_lens_sum), TritonAttnBackend.init_forward_metadata sizes the verify's kv_indices as
bs * max_context_len = 8192 entries and the index build writes all 8194 committed tokens' slots into
them: 2 int64 past the end of the allocation, unchecked (on CPU the heap corruption aborts the process).

    python repro.py          # exit 0: correct; exit 1 and a BUG line, or an abort right after the UNGUARDED line: the bug
Runs on a GPU, or on CPU under Triton's interpreter (fp32; about 20 s).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (DEVICE, TOLERANCE, Pools, Shape, attend, chain_verify_batch, forward_kv, eagle_args,  # noqa: E402
                            Problems, layer, model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

CONTEXT, STEPS = 4096, 5
DRAFT = STEPS + 1  # an EAGLE chain verifies num_steps + 1 tokens
COMMITTED = [CONTEXT - 5 + DRAFT] * 2  # the 0.5.22+ wall (one token more on 0.5.17-0.5.21)


def main() -> int:
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    shape = Shape(num_heads=4, num_kv_heads=1, head_dim=64, context_len=CONTEXT,
                  dtype=torch.bfloat16 if DEVICE == "cuda" else torch.float32)
    generator = torch.Generator().manual_seed(0)
    with server_state(attention_backend="triton", page_size=1, **eagle_args(1, STEPS, DRAFT)) as args:
        pools = Pools(shape, [n + DRAFT for n in COMMITTED], args)
        for request, committed in enumerate(COMMITTED):
            random_kv(pools, request, range(committed + DRAFT), generator)  # the prefix and the draft tokens
        backend = TritonAttnBackend(model_runner(shape, pools, args))
        batch = chain_verify_batch(pools, COMMITTED, STEPS, host_mirrors=False)  # the GPU-only path
        print("UNGUARDED: init_forward_metadata builds the GPU-only verify's kv_indices at the context wall "
              "(on the CPU an overrun may abort the process here)", flush=True)
        backend.init_forward_metadata(batch)
        bs, metadata = len(COMMITTED), backend.forward_metadata
        written, held = int(metadata.kv_indptr[bs]), metadata.kv_indices.numel()
        problems = Problems()
        if written > held:
            problems.add(f"the verify's kv_indices hold {held} entries (bs {bs} x max_context_len {CONTEXT}); "
                         f"the index build wrote {written} (committed {COMMITTED}): {written - held} int64 "
                         "past the end of the allocation")
        tokens = bs * DRAFT
        q = normal(generator, tokens, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        out = attend(backend, batch, layer(shape), q, *forward_kv(pools, COMMITTED, [DRAFT] * len(COMMITTED)))
        worst = worst_error(out, q, pools, [(r, list(range(n + j + 1))) for r, n in enumerate(COMMITTED)
                                            for j in range(DRAFT)])
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"output differs from the float64 reference by {worst:.3g} "
                         f"(tolerance {TOLERANCE[shape.dtype]})")
        return verdict(problems, f"kv_indices hold {held} >= {written} written; output within {worst:.2g} of the reference")


if __name__ == "__main__":
    sys.exit(main())
