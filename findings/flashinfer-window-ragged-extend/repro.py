"""FlashInfer's extend attends past the sliding window: the ragged pass is planned without it.

A model with sliding-window layers (Gemma 2/3, Mistral v0.1): FlashInferAttnBackend builds two
wrapper kinds (window, full) but one ragged prefill wrapper, which
FlashInferIndicesUpdaterPrefill.update_sliding_window plans without window_left. FlashInfer picks its
kernel at plan time, so the window_left that forward_extend passes at run time is ignored, and the
no-prefix branch (a plain prefill) passes none. A window layer's new tokens then see every earlier new
token, not the last `window` of them:

- batch 1: a plain prefill, no prefix (bs 2, 40 and 17 new tokens);
- batch 2: an extend over a prefix (a prefix-cache hit, a chunk after the first, EAGLE's draft extend),
  prefix 24 then 40 new tokens;

window 8 (HF `sliding_window`), 8 query / 4 KV heads of 128, bf16. No speculative decoding needed.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (TOLERANCE, Pools, Problems, Shape, attend, forward_kv, extend_batch, in_window,  # noqa: E402
                            layer, model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

WINDOW = 8  # the model's (HF config) sliding_window; the layer gets WINDOW - 1
BATCHES = {"plain prefill, no prefix": ([0, 0], [40, 17]), "extend over a prefix": ([24], [40])}


def run(name: str, prefix_lens: list[int], extend_lens: list[int], problems: Problems) -> str:
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    shape = Shape(num_heads=8, num_kv_heads=4, head_dim=128, context_len=4096, sliding_window=WINDOW - 1)
    generator = torch.Generator().manual_seed(len(name))
    with server_state(attention_backend="flashinfer", page_size=1) as args:
        pools = Pools(shape, [p + e for p, e in zip(prefix_lens, extend_lens)], args)
        for request, (prefix, extend) in enumerate(zip(prefix_lens, extend_lens)):
            random_kv(pools, request, range(prefix + extend), generator)
        backend = FlashInferAttnBackend(model_runner(shape, pools, args, algorithm=None))
        batch = extend_batch(pools, prefix_lens, extend_lens)
        backend.init_forward_metadata(batch)
        q = normal(generator, sum(extend_lens), shape.num_heads, shape.head_dim, dtype=shape.dtype)
        out = attend(backend, batch, layer(shape), q, *forward_kv(pools, prefix_lens, extend_lens))
        seen = [(r, in_window(p + j, range(p + j + 1), WINDOW)) for r, (p, e) in enumerate(zip(prefix_lens,
                                                                                             extend_lens))
                for j in range(e)]
        worst = worst_error(out, q, pools, seen)
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"{name}: a window layer's output differs from the windowed float64 reference by "
                         f"{worst:.3g} (tolerance {TOLERANCE[shape.dtype]}); the new tokens attend outside "
                         f"their window of {WINDOW}")
        return f"{name} within {worst:.2g}"


def main() -> int:
    problems = Problems()
    ok = [run(name, *lens, problems) for name, lens in BATCHES.items()]
    return verdict(problems, "; ".join(ok))


if __name__ == "__main__":
    sys.exit(main())
