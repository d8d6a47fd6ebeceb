"""FlashInfer's DFlash draft, replayed from its CUDA graph, plans its keys from a host bound that leaves
the block out when the worker keeps a compact draft cache (--speculative-draft-window-size).

The DFlash draft runs one TARGET_VERIFY forward over the committed suffix and the block, non-causal.
The worker hands the backend seq_lens = the kept suffix; its host mirror is committed + block without a
window, but min(committed, window [+ page]) with one (dflash_worker_v2._fill_compact_seq_lens_cpu_bound).
At capture FlashInfer installs fast_prefill_plan for a DFlash verify without a mask, which takes
seq_lens_cpu verbatim as each request's KV length at every replay ("the batch carries seq_lens_cpu =
prefix + draft_token_num ... all add the verify window host-side"). With the compact cache that is short
by the block.

Two requests (16000 and 9 committed tokens, window 16384 so the suffix is the whole prefix, block 4;
32 query / 2 KV heads of 64, bf16, page 1), captured once, replayed with the non-compact mirror
(committed + block) and with the compact one (committed), each against a float64 reference over the
prefix and the whole block. On an H200 through the harness the compact replay was off by 1.90 and the
non-compact one passed; eager (planned from the device) passed both.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (DEVICE, TOLERANCE, Pools, Problems, Shape, attend, captured, forward_kv,  # noqa: E402
                            layer, model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

COMMITTED, BLOCK, WINDOW = [16000, 9], 4, 16384


def main() -> int:
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    bs, tokens = len(COMMITTED), len(COMMITTED) * BLOCK
    shape = Shape(num_heads=32, num_kv_heads=2, head_dim=64, context_len=WINDOW + 64, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(0)
    speculative = dict(speculative_algorithm="DFLASH", speculative_eagle_topk=1, speculative_num_steps=1,
                       speculative_num_draft_tokens=BLOCK, speculative_draft_window_size=WINDOW)
    problems = Problems()
    with server_state(attention_backend="flashinfer", page_size=1, **speculative) as args:
        pools = Pools(shape, [n + 2 * BLOCK for n in COMMITTED], args)  # the DFlash reservation, 2 x block
        for request, committed in enumerate(COMMITTED):
            random_kv(pools, request, range(committed + BLOCK), generator)
        backend = FlashInferAttnBackend(model_runner(shape, pools, args, draft_worker=True, algorithm="DFLASH"))
        backend.init_cuda_graph_state(bs, tokens)
        positions = pools.tensor([p for n in COMMITTED for p in range(n, n + BLOCK)])
        batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs,
            input_ids=torch.zeros(tokens, dtype=torch.int64, device=DEVICE),
            req_pool_indices=pools.tensor(pools.req_pool_indices[:bs]), seq_lens=pools.tensor(COMMITTED),
            out_cache_loc=torch.cat([pools.slots(r, range(n, n + BLOCK)) for r, n in enumerate(COMMITTED)]),
            seq_lens_cpu=torch.tensor([n + BLOCK for n in COMMITTED], dtype=torch.int32),
            seq_lens_sum=sum(COMMITTED) + tokens, positions=positions,
            spec_info=make_draft_block_spec_info(draft_token_num=BLOCK, device=DEVICE),
            spec_algorithm=SpeculativeAlgorithm.from_string("DFLASH"))
        backend.init_forward_metadata_out_graph(batch, in_capture=True)  # installs the fast plan
        q = normal(generator, tokens, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        k, v = forward_kv(pools, COMMITTED, [BLOCK] * len(COMMITTED))
        draft_layer = layer(shape, "ENCODER_ONLY")
        graph, out = captured(lambda: attend(backend, batch, draft_layer, q, k, v))
        seen = [(r, list(range(n + BLOCK))) for r, n in enumerate(COMMITTED) for _ in range(BLOCK)]
        for label, host in (("non-compact mirror, committed + block", [n + BLOCK for n in COMMITTED]),
                            ("compact mirror, min(committed, window)", [min(n, WINDOW) for n in COMMITTED])):
            batch.seq_lens_cpu, batch.seq_lens_sum = torch.tensor(host, dtype=torch.int32), sum(host)
            backend.init_forward_metadata_out_graph(batch)
            graph.replay()
            torch.cuda.synchronize()
            worst = worst_error(out, q, pools, seen)
            print(f"{label} {host}: max abs error {worst:.3g} against the prefix and the whole block", flush=True)
            if not worst <= TOLERANCE[shape.dtype]:
                problems.add(f"replay with the {label} {host}: off by {worst:.3g} (tolerance "
                             f"{TOLERANCE[shape.dtype]}); the device holds {[n + BLOCK for n in COMMITTED]} keys")
        return verdict(problems, "both replays within tolerance of the reference")


if __name__ == "__main__":
    sys.exit(main() if DEVICE == "cuda" else 2)
