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

With ``draft_window`` W (--speculative-draft-window-size) the worker keeps a compact draft cache
(use_compact_draft_cache): each step it rebuilds the draft runner's own req_to_token row as the last
compact(L) committed tokens, then the block (_rebuild_compact_draft_cache), and hands the backend
seq_lens = compact(L) (_compute_compact_draft_seq_lens: min(L, W), widened to a page boundary on
pages) with a host bound that does not count the block: min(L, W + page) when page > 1, else
min(L, W), of the host lengths or of the reservation on the GPU-only path
(_fill_compact_seq_lens_cpu_bound, "consumers only need an upper bound"); the host bound is
sglang's function, called here. The harness lays a draft row out as the committed row, so a compact
case keeps every prefix where compact(L) = L (L <= W, or < W + page on pages; test_dflash_compact.py
holds that rule to sglang's _compute_compact_draft_seq_lens); its reference then sees the whole
prefix and the block, as the compact row does.

Every backend here takes ENCODER_ONLY as non-causal (Triton forward_extend, FlashInfer's paged
prefill, FA3/FA4 forward_extend: causal = False; torch_native too, but it has no TARGET_VERIFY).
torch_native is no DFlash draft backend either: resolve_draft_worker_attention_backend falls
back to flashinfer for it; its TARGET_VERIFY limit skips it first.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch

from harness.modes.dflash_verify import DFlashVerify, reserved_lens

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec


class DFlashDraft(DFlashVerify):
    name = "dflash_draft"
    backend_role = "draft"
    attn_type = "ENCODER_ONLY"
    capture_hidden = "NULL"
    mirror_dtypes = {"full": torch.int32, "gpu_only": torch.int32}

    compact_draft_cache = True

    def validate(self, case: CaseSpec) -> str | None:
        if case.sliding_window:
            return ("sliding_window: the DFlash draft's layers are non-causal (ENCODER_ONLY); which keys a "
                    "window leaves them is not modelled here (the verify side takes it)")
        return super().validate(case) or self._compact_problem(case)

    def _compact_problem(self, case: CaseSpec) -> str | None:
        if not (case.draft_window or case.draft_sink):
            return None
        if case.draft_sink:
            return "draft_sink: DFlash's compact draft cache keeps the last draft_window tokens, no sink"
        block = self.num_draft_tokens(case)
        if case.draft_window < block:
            return (f"draft_window: '--speculative-draft-window-size must be >= --speculative-num-draft-tokens "
                    f"(block_size)' (speculative_hook.py _handle_dflash): {case.draft_window} < {block}")
        kept = compact_keeps_whole(case.draft_window, case.page_size)
        longer = [index + 1 for index, prefix in enumerate(case.prefix_lens) if prefix > kept]
        if longer:
            return (f"prefix_lens: item {longer[0]} ({case.prefix_lens[longer[0] - 1]}) is longer than a compact "
                    f"draft row keeps whole ({kept} with draft_window {case.draft_window}, page_size "
                    f"{case.page_size}); the harness lays the draft row out as the committed one, so keep each "
                    f"prefix <= {kept}")
        return None

    def host_lens(self, spec: CaseSpec) -> list[int]:
        """Without a window, as the verify's; with one, sglang's compact host bound of them."""
        if not spec.draft_window:
            return super().host_lens(spec)
        block = self.num_draft_tokens(spec)
        sources = (spec.prefix_lens if spec.host_mirrors == "full"
                   else reserved_lens(spec, block))
        return _compact_host_bound(spec, sources)

    def visible_block(self, token: int, block: int) -> range:
        """The whole block, whatever the token: the draft's layers are non-causal."""
        return range(block)

    def block_input(self, block: int, device, positions: torch.Tensor | None):
        """sglang's own draft-block input; the decode graph runner captures the same for a draft worker."""
        from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info

        return make_draft_block_spec_info(draft_token_num=block, device=device)


def compact_keeps_whole(window: int, page_size: int) -> int:
    """The longest prefix sglang's compact draft row keeps whole (compact(L) = L): its suffix starts
    at L - min(L, W) rounded down to a page, which is 0 while L <= W, or L < W + page on pages
    (test_dflash_compact.py holds this to sglang's own function)."""
    return window if page_size <= 1 else window + page_size - 1


def _compact_host_bound(spec: CaseSpec, lens: list[int]) -> list[int]:
    """sglang's host bound of the compact draft lengths of ``lens`` (its worker method reads only the
    window and the page size from the worker). The device lengths need no call: a case keeps them
    equal to the prefixes (compact_keeps_whole)."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    worker = SimpleNamespace(draft_window_size=spec.draft_window, page_size=spec.page_size)
    out = torch.empty(len(lens), dtype=torch.int32)
    DFlashWorkerV2._compute_compact_draft_seq_lens_host(worker, torch.tensor(lens, dtype=torch.int64), out=out)
    return out.tolist()


MODE = DFlashDraft()
