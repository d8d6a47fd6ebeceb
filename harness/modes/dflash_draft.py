"""DFlash draft: one forward of the draft model over the whole block, non-causal inside it.

Production contract (sglang 0.5.23, speculative/dflash_worker_v2.py
DFlashWorkerV2.forward_batch_generation, step "1) Draft a fixed block", non-windowed draft
cache): the draft worker is a plain TpModelWorker (draft_worker_common.build_draft_tp_worker)
whose single-step backend runs one TARGET_VERIFY forward per decode step. Its spec_info is
draft_worker_common.make_draft_block_spec_info (a DFlashVerifyInput with no tokens, no
positions, custom_mask None, capture_hidden NULL); seq_lens is the committed prefix; the block's
K/V are written at the verify slots (out_cache_loc, row positions prefix .. prefix + block - 1),
positions prefix + j. The draft model's full-attention layers are ENCODER_ONLY
(models/dflash.py _get_dflash_layer_attention_params, when the config names no causality), so
every block token sees the committed prefix and the whole block, itself and later tokens
included. Host mirrors as the verify's (dflash_verify.py), in the worker's own int32 buffer
(_draft_seq_lens_cpu_buf): committed + block, or the reservation nxt_kv_lens_cpu on the
GPU-only path.

Every backend here takes ENCODER_ONLY as non-causal (Triton forward_extend, FlashInfer's paged
prefill, FA3/FA4 forward_extend: causal = False; torch_native too, but it has no TARGET_VERIFY).
torch_native is no DFlash draft backend either: resolve_draft_worker_attention_backend falls
back to flashinfer for it; its TARGET_VERIFY limit skips it first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.modes.dflash_verify import DFlashVerify

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec


class DFlashDraft(DFlashVerify):
    name = "dflash_draft"
    backend_role = "draft"
    attn_type = "ENCODER_ONLY"
    capture_hidden = "NULL"
    mirror_dtypes = {"full": torch.int32, "gpu_only": torch.int32}

    def validate(self, case: CaseSpec) -> str | None:
        if case.sliding_window:
            return ("sliding_window: the DFlash draft's layers are non-causal (ENCODER_ONLY); which keys a "
                    "window leaves them is not modelled here (the verify side takes it)")
        return super().validate(case)

    def visible_block(self, token: int, block: int) -> range:
        """The whole block, whatever the token: the draft's layers are non-causal."""
        return range(block)

    def block_input(self, block: int, device, positions: torch.Tensor | None):
        """sglang's own draft-block input; the decode graph runner captures the same for a draft worker."""
        from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info

        return make_draft_block_spec_info(draft_token_num=block, device=device)


MODE = DFlashDraft()
