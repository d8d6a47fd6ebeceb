"""FlashMLA's multi-step EAGLE/MTP draft attends the committed prefix only: each draft token is blind
to itself and to the draft tokens before it.

DeepSeek-V3 MTP on --attention-backend flashmla with --speculative-num-steps 3 (topk 1, the only topk
FlashMLA drafts with). Draft step s writes its token at row position committed + s and should see
committed + s + 1 keys, as sglang's other draft backends give it (FlashAttentionBackend: seq_lens +
step_id + 1; FlashInfer's: generate_draft_decode_kv_indices). FlashMLAMultiStepDraftBackend initialises
every step's FlashMLABackend as a plain DECODE over forward_batch.seq_lens, the committed prefix, which
eagle_worker_v2.draft_forward never moves between steps: the block table and get_mla_metadata cover the
prefix, and forward_decode passes cache_seqlens=forward_batch.seq_lens; the CUDA graph's metadata the
same. The reproducer runs the eager and the graph metadata (without capturing). Verify stays exact;
the drafts, and so the acceptance, are worse.

    python repro.py    # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashMLA, Hopper)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import MlaShape, mla_chain_draft  # noqa: E402

STEPS, COMMITTED = 3, [70, 129, 200]  # requests ending mid-page, one page, and past it (FlashMLA's page 64)


def main() -> int:
    from sglang.srt.layers.attention.flashmla_backend import FlashMLAMultiStepDraftBackend

    # FlashMLA opts out of the host mirrors (needs_cpu_seq_lens False)
    return mla_chain_draft(FlashMLAMultiStepDraftBackend, "flashmla", MlaShape(page_size=64), COMMITTED, STEPS,
                           host_mirrors=False)


if __name__ == "__main__":
    sys.exit(main())
