"""Dense attention's backend entries: sglang's classes per role, their limits, partial merges and
graph buffers (harness/fixtures/backends.py BackendEntry says what each field means)."""

from __future__ import annotations

from harness.base import releases
from harness.fixtures.backends import (EAGLE_PAGED_TREE, HALF_PRECISION, NGRAM_PAGED, BackendEntry, Limit,
                                       PartialMerge, build_from, merges_when, mode_is, window_in_draft_decode_before,
                                       window_in_paged_tree_verify)


FA_MERGES = (
    PartialMerge(merges_when("TARGET_VERIFY", tree=True), "prefix|new",
                 "flashattention_backend.py forward_extend: use_cascade_attn (topk > 1), prefix and expand "
                 "outputs merged by merge_state_v2_wrapper"),
    PartialMerge(merges_when("DECODE", tree=True), "page|rest",
                 "flashattention_backend.py forward_decode (topk > 1): the prefix up to its last page boundary "
                 "(init_forward_metadata: cache_seqlens -= last_page_lens) and the branch's pages, the prefix "
                 "tail copy included (draft_decode_set_expand_metadata), merged by merge_state_v2"),
)
FLASHINFER_MERGES = (
    PartialMerge(merges_when("DRAFT_EXTEND_V2", graph=False), "prefix|new",
                 "flashinfer_backend.py forward_extend: ragged (new tokens) and paged (prefix) outputs merged "
                 "by _safe_merge_state"),
    PartialMerge(merges_when("DRAFT_EXTEND_V2", graph=True), "any",
                 "flashinfer_backend.py forward_extend under a graph: one paged prefill whose split-KV "
                 "partials are merged inside FlashInfer"),
)


TRITON_GRAPH_BUFFERS = frozenset({
    "cuda_graph_kv_indices",  # multi-step: one 2-D buffer, a row per step backend
    "cuda_graph_num_kv_splits",  # multi-step: one buffer shared by all step backends
    "cuda_graph_attn_logits", "cuda_graph_attn_lse",
    "_verify_mask.buffer",  # target role only
})
TRITON_WINDOW = frozenset({  # with a model window (sliding_window): the window layers' read rail
    "cuda_graph_window_kv_indices",  # multi-step 0.5.23+: also the owner's 2-D buffer, a row per step
    "cuda_graph_window_num_kv_splits", "cuda_graph_window_kv_offsets",
})
TRITON_LEAN_DECODE = frozenset({  # persistent-grid decode partials (0.5.19+)
    "cuda_graph_lean_Mp", "cuda_graph_lean_Lp", "cuda_graph_lean_Op", "cuda_graph_lean_locks"})


def keys(attribute: str, *keys: str) -> set[str]:
    """Graph buffers kept in a dict attribute (FA3/FA4 metadata dicts)."""
    return {f"{attribute}[{key!r}]" for key in keys}


FA_TABLES = ("cache_seqlens", "cu_seqlens_q", "cu_seqlens_k", "page_table")
FA_GRAPH_BUFFERS = frozenset({
    *keys("decode_cuda_graph_metadata", *FA_TABLES, "strided_indices", "page_table_draft_decode"),
    *keys("target_verify_metadata", *FA_TABLES, "strided_indices"),
    *keys("draft_extend_metadata", *FA_TABLES, "strided_indices"),
    *keys("draft_decode_metadata_topk_normal", *FA_TABLES),  # topk > 1 only
    *keys("draft_decode_metadata_topk_expand", *FA_TABLES),
    *keys("target_verify_metadata_topk_normal", *FA_TABLES),
    *keys("target_verify_metadata_topk_expand", *FA_TABLES),
    *keys("target_verify_metadata_topk_swa", *FA_TABLES),  # topk > 1 with a model window
    "_verify_mask.buffer",  # target role only
})


def _flash_attention(version: int, import_check: str, min_capability: tuple[int, int],
                     dtype_reason: str, graph_buffers: frozenset[str], limits: tuple[Limit, ...]) -> BackendEntry:
    """FA3 and FA4 are one sglang class, FlashAttentionBackend, told apart by fa_impl_ver."""
    return BackendEntry(
        name=f"fa{version}", server_arg=f"fa{version}", needs_gpu=True, import_check=import_check,
        build=build_from("sglang.srt.layers.attention.flashattention_backend", "FlashAttentionBackend",
                     "FlashAttentionMultiStepBackend", fa_impl_ver=version),
        min_capability=min_capability, dtypes=HALF_PRECISION, dtype_reason=dtype_reason,
        graph_buffers=releases.since({"0.5.17": graph_buffers}), partial_merges=FA_MERGES,
        limits=(
            Limit(window_in_paged_tree_verify,
                  "FlashAttention backend doesn't support topk > 1 speculative decoding with page size > 1 "
                  "sliding window attention (flashattention_backend.py _init_sliding_window_attn_spec_metadata, "
                  "0.5.17-0.5.23)"),
            *limits,
        ),
    )


ENTRIES: dict[str, BackendEntry] = {
    entry.name: entry
    for entry in (
        BackendEntry(
            name="triton", server_arg="triton", needs_gpu=False, import_check="triton",
            build=build_from("sglang.srt.layers.attention.triton_backend",
                         "TritonAttnBackend", "TritonMultiStepDraftBackend"),
            triton_kernels=True, cg_meta_exact=True, draft_window_since="0.5.21",
            graph_buffers=releases.since({
                "0.5.17": TRITON_GRAPH_BUFFERS | TRITON_WINDOW,
                "0.5.19": TRITON_GRAPH_BUFFERS | TRITON_WINDOW | TRITON_LEAN_DECODE,
                "0.5.23": TRITON_GRAPH_BUFFERS | TRITON_WINDOW | TRITON_LEAN_DECODE | {"cuda_graph_uneven_batch"},
            }),
            limits=(
                Limit(window_in_draft_decode_before("0.5.23"),
                      "a sliding-window layer reads forward_metadata.window_kv_indices, which "
                      "TritonMultiStepDraftBackend leaves None before sglang 0.5.23 (its per-step window rail, "
                      "window_rail / generate_draft_decode_window_kv_indices, arrives in 0.5.23)"),
                NGRAM_PAGED,
            ),
        ),
        BackendEntry(
            name="flashinfer", server_arg="flashinfer", needs_gpu=True, import_check="flashinfer",
            build=build_from("sglang.srt.layers.attention.flashinfer_backend",
                         "FlashInferAttnBackend", "FlashInferMultiStepDraftBackend"),
            dtypes=HALF_PRECISION, draft_window_since="0.5.21", partial_merges=FLASHINFER_MERGES,
            dtype_reason="FlashInfer kernels take fp16/bf16 (fp32 raises KeyError: torch.float32)",
            graph_buffers=releases.since({"0.5.17": frozenset({
                "cuda_graph_kv_indices",  # multi-step owner: one 2-D buffer, a row per step backend
                "cuda_graph_kv_indices[*]",  # one per wrapper; a step backend's first is its row
                "cuda_graph_custom_mask", "cuda_graph_qk_indptr[*]", "cuda_graph_qo_indptr[*]",
                # the verify / draft-extend graphs' own workspace, allocated only under
                # --apply-fix flashinfer-graph-workspace (harness/bugs/seed_bugs.py)
                "cuda_graph_prefill_workspace_buffer",
            })}),
        ),
        _flash_attention(3, "sgl_kernel.flash_attn", (8, 0),
                         "FA3 kernels take fp16/bf16 only (sgl_kernel flash_attn dtype check)",
                         FA_GRAPH_BUFFERS | {"_sched_meta_buf"},  # FA3's scheduler metadata
                         limits=(NGRAM_PAGED,)),
        _flash_attention(4, "cutlass", (9, 0),
                         "FA4 CuTe: inputs must be float16, bfloat16, fp8 e4m3fn, or fp8 e5m2",
                         FA_GRAPH_BUFFERS, limits=(EAGLE_PAGED_TREE, NGRAM_PAGED)),
        BackendEntry(
            name="torch_native", server_arg="torch_native", needs_gpu=False, import_check="torch",
            build=build_from("sglang.srt.layers.attention.torch_native_backend",
                         "TorchNativeAttnBackend", "TorchNativeAttnBackend"),
            no_graph_reason="init_cuda_graph_state raises NotImplementedError",
            limits=(
                Limit(mode_is("backend_role", "draft_multi_step"),
                      "EAGLE is not supported in decode attention backend torch_native "
                      "(sglang DraftBackendFactory; no multi-step class)"),
                Limit(mode_is("forward_mode", "TARGET_VERIFY"),
                      "TARGET_VERIFY is not supported: forward_extend ignores spec_info.custom_mask "
                      "and reads extend_prefix_lens, which verify batches do not carry"),
                EAGLE_PAGED_TREE,
            ),
        ),
    )
}
