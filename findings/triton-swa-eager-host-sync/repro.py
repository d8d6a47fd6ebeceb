"""TritonAttnBackend waits on the GPU in every eager metadata init of a sliding-window layer, though it
declares needs_cpu_seq_lens = False (the scheduler then skips the host copy of the lengths for it).

update_sliding_window_buffer allocates the window's kv_indices as torch.empty(window_kv_indptr[-1]): the
size is a device scalar, so the host blocks until the GPU has computed the window lengths. An EAGLE
chain verify of two requests (committed 40 and 9 tokens, 4 draft tokens, window 32 as in Gemma's HF
config, 31 as sglang's layer holds it) on the GPU-only path (no seq_lens_cpu, as the scheduler runs
Triton), with torch's sync debug mode set to "error" around init_forward_metadata alone; the output is
then checked against a float64 windowed reference, so a fix that breaks the indices shows too.

    python repro.py          # exit 1 and a BUG line: the bug; exit 0: no sync and a correct output
Needs a CUDA GPU (a CPU has no device to wait on: it says so and exits 2).
"""

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (DEVICE, TOLERANCE, Pools, Problems, Shape, attend, chain_verify_batch, forward_kv,  # noqa: E402
                            eagle_args, in_window, layer, model_runner, normal, random_kv, server_state, verdict,
                            worst_error)

import torch  # noqa: E402

COMMITTED, STEPS, WINDOW = [40, 9], 3, 32
DRAFT = STEPS + 1


def main() -> int:
    if DEVICE != "cuda":
        print("SKIP: a host sync needs a CUDA device to wait on", flush=True)
        return 2
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    shape = Shape(num_heads=4, num_kv_heads=1, head_dim=64, context_len=4096, dtype=torch.bfloat16,
                  sliding_window=WINDOW - 1)
    generator = torch.Generator().manual_seed(0)
    problems = Problems()
    with server_state(attention_backend="triton", page_size=1, **eagle_args(1, STEPS, DRAFT)) as args:
        pools = Pools(shape, [n + DRAFT for n in COMMITTED], args)
        for request, committed in enumerate(COMMITTED):
            random_kv(pools, request, range(committed + DRAFT), generator)
        backend = TritonAttnBackend(model_runner(shape, pools, args))
        batch = chain_verify_batch(pools, COMMITTED, STEPS, host_mirrors=False)  # the GPU-only path
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            backend.init_forward_metadata(batch)
        except RuntimeError as error:
            if "synchronizing" not in str(error):
                raise
            site = [f for f in traceback.extract_tb(error.__traceback__) if "/torch/" not in f.filename][-1]
            problems.add(f"init_forward_metadata waited on the GPU ({error}) at "
                         f"{site.filename.split('/sglang/')[-1]}:{site.lineno} in {site.name}: {(site.line or '').strip()}")
            torch.cuda.set_sync_debug_mode(0)
            backend.init_forward_metadata(batch)  # the same init, unguarded, so the output is still checked
        finally:
            torch.cuda.set_sync_debug_mode(0)
        q = normal(generator, len(COMMITTED) * DRAFT, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        out = attend(backend, batch, layer(shape), q, *forward_kv(pools, COMMITTED, [DRAFT] * len(COMMITTED)))
        seen = [(r, in_window(n + j, range(n + j + 1), WINDOW)) for r, n in enumerate(COMMITTED) for j in range(DRAFT)]
        worst = worst_error(out, q, pools, seen)
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"output differs from the windowed float64 reference by {worst:.3g} "
                         f"(tolerance {TOLERANCE[shape.dtype]})")
        return verdict(problems, f"no host sync in init_forward_metadata; output within {worst:.2g} of the reference")


if __name__ == "__main__":
    sys.exit(main())
