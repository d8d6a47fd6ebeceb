"""FlashInfer's multi-step EAGLE draft sizes its kv_indices rows by the model context; a draft at the
context wall does not fit, and sglang's own guard stops the forward.

EAGLE with topk 2 and 4 steps: sglang 0.5.22+ runs the draft on requests committed up to
4096 - 5 + 5 = 4096 tokens for a model of 4096 (one more on 0.5.17-0.5.21). The draft's kv_indices
row (FlashInferMultiStepDraftBackend.init_forward_metadata, and init_cuda_graph_state for the graph)
holds bs x topk x max_context_len = 8192 indices; the draft reads seq_lens_sum x topk + bs x topk x
num_steps = 8200 (each branch re-reads the prefix, then its own tokens), so assert_buffer_fits raises
(sglang 0.5.23; 0.5.17 has no guard and the index build writes past the row). The req_to_token row
itself (4096 + 4 + 9 columns) holds the request and its branches.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (TOLERANCE, Pools, Problems, Shape, attend, eagle_args, layer,  # noqa: E402
                            model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

CONTEXT, TOPK, STEPS = 4096, 2, 4
COMMITTED = CONTEXT - 5 + (STEPS + 1)  # the 0.5.22+ wall for a draft whose verify commits up to 5 tokens


def branch_position(branch: int, step: int) -> int:
    """Row position of a branch's step token: back to back after the prefix (page size 1)."""
    return COMMITTED + branch * STEPS + step


def main() -> int:
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferMultiStepDraftBackend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    shape = Shape(num_heads=8, num_kv_heads=2, head_dim=128, context_len=CONTEXT)
    generator = torch.Generator().manual_seed(0)
    with server_state(attention_backend="flashinfer", page_size=1, **eagle_args(TOPK, STEPS, TOPK * STEPS + 1)) as args:
        pools = Pools(shape, [COMMITTED + TOPK * STEPS], args)
        random_kv(pools, 0, range(COMMITTED + TOPK * STEPS), generator)
        backend = FlashInferMultiStepDraftBackend(model_runner(shape, pools, args, draft_worker=True), TOPK, STEPS)
        positions = pools.tensor([COMMITTED] * TOPK)
        spec_info = EagleDraftInput(capture_hidden_mode=CaptureHiddenMode.LAST, num_tokens_per_req=TOPK,
                                    num_tokens_for_logprob_per_req=TOPK)
        spec_info.positions = positions
        batch = ForwardBatch(
            forward_mode=ForwardMode.DECODE, batch_size=1,
            input_ids=torch.zeros(TOPK, dtype=torch.int64, device=positions.device),
            req_pool_indices=pools.tensor(pools.req_pool_indices[:1]), seq_lens=pools.tensor([COMMITTED]),
            out_cache_loc=pools.slots(0, [branch_position(b, s) for b in range(TOPK) for s in range(STEPS)]),
            seq_lens_sum=COMMITTED, seq_lens_cpu=torch.tensor([COMMITTED]), positions=positions,
            spec_info=spec_info, spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE"))
        problems = Problems()
        try:
            backend.init_forward_metadata(batch)
        except AssertionError as error:
            problems.add(f"draft at committed {COMMITTED} (context {CONTEXT}, topk {TOPK}, {STEPS} steps): "
                         f"init_forward_metadata raised AssertionError: {error}")
            return verdict(problems, "")
        worst = 0.0
        per_step = batch.out_cache_loc.view(1, TOPK, STEPS).permute(2, 0, 1).reshape(STEPS, TOPK)
        for step, step_backend in enumerate(backend.attn_backends):  # num_steps - 1 attention steps
            view = copy.copy(batch)
            view.out_cache_loc = per_step[step].contiguous()
            q = normal(generator, TOPK, shape.num_heads, shape.head_dim, dtype=shape.dtype)
            k, v = (torch.cat([pools.keys(0, [branch_position(b, step)])[i] for b in range(TOPK)]) for i in (0, 1))
            out = attend(step_backend, view, layer(shape), q, k.to(shape.dtype), v.to(shape.dtype))
            seen = [(0, [*range(COMMITTED), *(branch_position(b, s) for s in range(step + 1))]) for b in range(TOPK)]
            worst = max(worst, worst_error(out, q, pools, seen))
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"draft steps differ from the float64 reference by {worst:.3g}")
        return verdict(problems, f"the draft's kv_indices row holds the wall; steps within {worst:.2g}")


if __name__ == "__main__":
    sys.exit(main())
