"""FlashInfer MLA's multi-step EAGLE/MTP draft plans its steps from the committed prefix: eagerly
each draft token is blind to itself and to the drafts before it; from the CUDA graph, requests past
the first read misaligned keys.

DeepSeek-V3 MTP on --attention-backend flashinfer (FlashInferMLAAttnBackend) with
--speculative-num-steps 3, topk 1. FlashInferMLAMultiStepDraftBackend.common_template builds each
step's kv_indptr/kv_indices over the prefix and the chain's tokens 0..s (generate_draft_decode_kv_indices)
and sets them on spec_info. Eager: the step's init_forward_metadata plans its DECODE without spec_info,
from seq_lens (the prefix). CUDA graph: _apply_cuda_graph_metadata plans fast_mla_decode_plan with host
kv_indptr / lengths of the prefix while the indices are the draft's. The reproducer runs both paths'
metadata (the graph's without capturing) and checks every step against the float64 attention.

    python repro.py    # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import MlaShape, mla_chain_draft  # noqa: E402

STEPS, COMMITTED = 3, [70, 129, 200]


def main() -> int:
    from sglang.srt.layers.attention.flashinfer_mla_backend import FlashInferMLAMultiStepDraftBackend

    # its draft reads seq_lens_sum
    return mla_chain_draft(FlashInferMLAMultiStepDraftBackend, "flashinfer", MlaShape(), COMMITTED, STEPS, host_mirrors=True)


if __name__ == "__main__":
    sys.exit(main())
