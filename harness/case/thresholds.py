"""Sizes at which a backend switches code path, per release, and the case quantity that moves each.

A bug behind such a switch stays invisible until a cell stands on its far side, so every entry here
must have hand cells on both sides, per backend and mode it applies to (harness/case/test_thresholds.py
fails otherwise, naming the entry and the side that is missing). Each entry quotes the condition from
sglang's source: the test reads the installed release's module and fails when the quote is gone, so an
entry cannot outlive the code it describes unnoticed. Releases are the supported ones where the quote
is found (0.5.17 and 0.5.23 are checked by CI, each in its own environment); ``since`` says where an
entry begins when older releases lack it.

What no case quantity moves is not here: device-dependent schedules (the SM count in Triton's split
heuristic), library internals (FlashInfer's and FA3's own split heuristics, which the forced kernel paths
reach instead: harness/fixtures/kernel_paths.py), HIP-only paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.base.case_spec import CaseSpec
from harness.base.releases import installed, sglang_source, version_key

ELEMENT_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def _merge_threads(spec: CaseSpec) -> int:
    """FlashInfer's merge_state block: num_heads x (head_dim / vec_size) threads, vec_size as sglang
    mirrors it (flashinfer_backend._merge_state_max_safe_num_heads); over 1024 it falls back to Triton."""
    vec_size = max(16 // ELEMENT_SIZE[spec.dtype], spec.head_dim // 32)
    return spec.num_heads * (spec.head_dim // vec_size)


# What a threshold compares, computed from the case's value alone.
QUANTITIES: dict[str, Callable[[CaseSpec], int]] = {
    "bs": lambda spec: spec.bs,
    "longest_prefix": lambda spec: max(spec.prefix_lens),
    "heads_per_kv_head": lambda spec: spec.num_heads // spec.num_kv_heads,
    "head_dim": lambda spec: spec.head_dim,
    "topk": lambda spec: spec.topk,
    "page_size": lambda spec: spec.page_size,
    "context_len": lambda spec: spec.model_context_len,
    "host_mirrors_dropped": lambda spec: int(spec.host_mirrors != "full"),
    "deterministic": lambda spec: int(spec.deterministic),
    "merge_threads": _merge_threads,
}

DECODE_MODES = ("draft_decode",)
EXTEND_MODES = ("target_verify", "draft_extend_v2")


@dataclass(frozen=True)
class Threshold:
    id: str
    backends: tuple[str, ...]
    modes: tuple[str, ...]
    modules: tuple[str, ...]  # the sglang module whose source holds the condition (where it sits in each release)
    anchor: str  # the condition's text there, quoted
    quantity: str  # QUANTITIES key
    at: int  # the far side: quantity >= at
    switches: str  # what changes there, in sglang's terms
    given: tuple[str, int] | None = None  # only cells with this (quantity, at least) count: the path's precondition
    since: str = "0.5.17"

    def side(self, spec: CaseSpec) -> str | None:
        """'below' or 'above' for a case that meets the precondition, else None."""
        if self.given and QUANTITIES[self.given[0]](spec) < self.given[1]:
            return None
        return "above" if QUANTITIES[self.quantity](spec) >= self.at else "below"

    def source_problem(self) -> str | None:
        """Why the installed release's source does not hold the quoted condition, or None."""
        found = [text for module in self.modules if (text := sglang_source(module)) is not None]
        if not found:
            return f"{self.id}: this sglang has none of {', '.join(self.modules)}"
        if not any(self.anchor in text for text in found):
            return f"{self.id}: {', '.join(self.modules)} of sglang {installed().version} no longer hold {self.anchor!r}"
        return None

    def applies_here(self) -> bool:
        return version_key(installed().contracts) >= version_key(self.since)


TRITON_BACKEND = ("sglang.srt.layers.attention.triton_backend",)
TRITON_DECODE = ("sglang.kernels.ops.attention.decode_attention",)
TRITON_EXTEND = ("sglang.kernels.ops.attention.extend_attention",)
FLASHINFER = ("sglang.srt.layers.attention.flashinfer_backend",)
FA3 = ("sglang.srt.layers.attention.flashattention_backend",)
KV_INDICES = ("sglang.kernels.ops.attention.kv_indices",  # 0.5.23
              "sglang.kernels.ops.kvcache.kv_indices")  # 0.5.17-0.5.22

THRESHOLDS = (
    Threshold("triton-split-schedule", ("triton", "triton_mla"), DECODE_MODES, TRITON_BACKEND,
              "if num_seq < 256:", "bs", 256,
              "get_num_kv_splits schedules 256 sequences below, the next power of two from 256 on (a new kernel "
              "specialisation)"),
    Threshold("triton-min-block", ("triton", "triton_mla"), DECODE_MODES, TRITON_DECODE,
              "_MIN_BLOCK_KV = 32", "longest_prefix", 33,
              "decode splits are whole 32-token blocks: up to 32 keys one live split, beyond it several"),
    Threshold("triton-grouped-block-h", ("triton",), DECODE_MODES, TRITON_DECODE,
              "if BLOCK_H < kv_group_num:", "heads_per_kv_head", 17,
              "the grouped decode kernel covers up to 16 query heads per KV head in one block, more in several"),
    Threshold("triton-extend-block", ("triton",), EXTEND_MODES, TRITON_EXTEND,
              "if Lq <= 128:", "head_dim", 129,
              "the extend kernel's block sizes for head_dim up to 128, and smaller blocks above"),
    Threshold("triton-deterministic-tile", ("triton", "triton_mla"), DECODE_MODES, TRITON_BACKEND,
              '"SGLANG_TRITON_DECODE_SPLIT_TILE_SIZE", 256', "longest_prefix", 257,
              "deterministic decode splits every request by a fixed 256-token tile: one split up to 256 keys",
              given=("deterministic", 1)),
    Threshold("triton-gpu-only-bound", ("triton",), ("target_verify",), TRITON_BACKEND,
              "seq_lens_sum = bs * self.max_context_len", "host_mirrors_dropped", 1,
              "without seq_lens_sum the eager kv_indices are sized by bs x max_context_len, an upper bound"),
    Threshold("kv-index-token-blocks", ("triton", "flashinfer"), EXTEND_MODES,
              KV_INDICES, "SPEC_KV_INDEX_BLOCKS_MIN_CONTEXT = 32768",
              "context_len", 32768,
              "EAGLE's verify and draft-extend KV-index gathers run token-block parallel from a 32768 context on",
              since="0.5.23"),
    Threshold("flashinfer-tensor-core-decode", ("flashinfer",), DECODE_MODES, FLASHINFER,
              "return gqa_group_size >= 4", "heads_per_kv_head", 4,
              "bf16/fp16 decode runs FlashInfer's tensor-core kernels from 4 query heads per KV head on"),
    Threshold("flashinfer-merge-state-heads", ("flashinfer",), ("draft_extend_v2",), FLASHINFER,
              "vec_size = max(16 // element_size, head_dim // 32)", "merge_threads", 1025,
              "the ragged+paged merge runs FlashInfer's CUDA merge_state up to 1024 threads a block, sglang's "
              "Triton merge above (findings/flashinfer-merge-state-lse-base)"),
    Threshold("fa3-cascade", ("fa3", "fa4", "fa3_mla"), ("target_verify", "draft_decode"), FA3,
              "self.topk > 1", "topk", 2,
              "a tree (topk > 1) attends in two calls, prefix and draft, merged by merge_state_v2"),
    # fa4 is not here: sglang serves paged trees on flashinfer, fa3 and triton only (_PAGE_TREE_SPEC_BACKENDS)
    Threshold("fa3-draft-page-split", ("fa3",), ("draft_decode",), FA3,
              "last_page_lens = forward_batch.seq_lens % self.page_size", "page_size", 2,
              "a paged tree draft reads its prefix's last partial page with the branch, not the prefix",
              given=("topk", 2)),
    Threshold("flashmla-block-table-program", ("flashmla",), ("target_verify", "draft_decode"),
              KV_INDICES, "_FLASHMLA_CREATE_KV_BLOCK_SIZE = 4096", "longest_prefix", 4097,
              "FlashMLA's block-table builder covers 4096 tokens per program; a longer row takes a second"),
)
