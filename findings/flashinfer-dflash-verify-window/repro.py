"""FlashInfer runs a DFlash verify on a sliding-window layer with no per-query window.

DFlash verifies a block of D draft tokens per request as a chain (TARGET_VERIFY, a DFlashVerifyInput
with no custom mask: "TARGET_VERIFY uses standard causal masking"). On a window layer,
FlashInferIndicesUpdaterPrefill.update_sliding_window packs each request's keys from
P - min(P, L) (P committed tokens, L the layer's sliding_window_size, the HF window - 1) and leaves the
per-query window to FlashInfer's plan-time window_left, which it plans only when spec_info is None. So
block token j sees [P - L, P + j] instead of [P + j - L, P + j]: j keys too many.

bs 1, P = 200, D = 8, window 64 (HF), 8 query / 2 KV heads of 128, bf16, full host mirrors as the
DFlash worker passes them (seq_lens_cpu = P + D). The keys at P - L .. P - L + D - 2 (inside the
window of token 0, outside that of the later tokens) are aligned with the queries, so a token that
sees them when it should not moves by O(1).

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (DEVICE, TOLERANCE, Pools, Problems, Shape, attend, in_window, layer,  # noqa: E402
                            model_runner, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

COMMITTED, BLOCK, WINDOW = 200, 8, 64
FOCUS = 4.0


def main() -> int:
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.dflash_info import DFlashVerifyInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    shape = Shape(num_heads=8, num_kv_heads=2, head_dim=128, context_len=4096, sliding_window=WINDOW - 1)
    generator = torch.Generator().manual_seed(0)
    speculative = dict(speculative_algorithm="DFLASH", speculative_eagle_topk=1, speculative_num_steps=1,
                       speculative_num_draft_tokens=BLOCK)
    with server_state(attention_backend="flashinfer", page_size=1, **speculative) as args:
        # the row holds the DFlash decode reservation, committed + 2 x block (dflash_info_v2.prepare_for_decode)
        pools = Pools(shape, [COMMITTED + 2 * BLOCK], args)
        random_kv(pools, 0, range(COMMITTED + BLOCK), generator)
        group = shape.num_heads // shape.num_kv_heads
        direction = torch.randn(shape.num_kv_heads, shape.head_dim, generator=generator)
        oldest = COMMITTED - (WINDOW - 1)
        focused = range(oldest, oldest + BLOCK - 1)
        pools.write(0, focused, (FOCUS * direction).expand(len(focused), -1, -1), pools.keys(0, focused)[1])
        q = (FOCUS * direction).repeat_interleave(group, dim=0).expand(BLOCK, -1, -1).to(DEVICE, shape.dtype)
        backend = FlashInferAttnBackend(model_runner(shape, pools, args, algorithm="DFLASH"))
        positions = pools.tensor(list(range(COMMITTED, COMMITTED + BLOCK)))
        batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=1,
            input_ids=torch.zeros(BLOCK, dtype=torch.int64, device=DEVICE),
            req_pool_indices=pools.tensor(pools.req_pool_indices[:1]), seq_lens=pools.tensor([COMMITTED]),
            out_cache_loc=pools.slots(0, range(COMMITTED, COMMITTED + BLOCK)),
            # the DFlash worker's verify host bound: committed + block
            seq_lens_cpu=torch.tensor([COMMITTED + BLOCK]), seq_lens_sum=COMMITTED + BLOCK, positions=positions,
            spec_info=DFlashVerifyInput(draft_token=torch.zeros_like(positions), positions=positions,
                                        draft_token_num=BLOCK, custom_mask=None,
                                        capture_hidden_mode=CaptureHiddenMode.FULL),
            spec_algorithm=SpeculativeAlgorithm.from_string("DFLASH"))
        backend.init_forward_metadata(batch)
        k, v = pools.keys(0, range(COMMITTED, COMMITTED + BLOCK))
        out = attend(backend, batch, layer(shape), q, k.to(shape.dtype), v.to(shape.dtype))
        seen = [(0, in_window(COMMITTED + j, range(COMMITTED + j + 1), WINDOW)) for j in range(BLOCK)]
        worst = worst_error(out, q, pools, seen)
        problems = Problems()
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"the block's output differs from the windowed float64 reference by {worst:.3g} "
                         f"(tolerance {TOLERANCE[shape.dtype]}): block token j attends j keys outside its window "
                         f"of {WINDOW}")
        return verdict(problems, f"within {worst:.2g} of the windowed reference")


if __name__ == "__main__":
    sys.exit(main())
