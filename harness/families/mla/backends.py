"""MLA's backend entries: the classes sglang builds for an MLA model under each --attention-backend
(attention_registry.py: ``use_mla_backend`` picks FlashInferMLAAttnBackend for flashinfer; FA3 and
Triton are the dense classes reading ``attention_arch``), their limits with sglang's own reasons,
their partial merges and graph buffers. Entry names end in ``_mla`` where sglang's name is shared
with a dense backend, so every cell id says its family.

Blackwell's trtllm_mla and 0.5.17-0.5.19's cutlass_mla are entries too, so their cells are
collected and each skip says sglang's refusal; no cell of theirs has run (no Blackwell machine is
lent), so their graph buffers are undeclared and a first run there would name them."""

from __future__ import annotations

from harness.base import releases
from harness.families.dense.backends import (FA_GRAPH_BUFFERS, FA_MERGES, TRITON_GRAPH_BUFFERS, TRITON_LEAN_DECODE,
                                             TRITON_WINDOW)
from harness.fixtures.backends import (EAGLE_PAGED_TREE, HALF_PRECISION, NGRAM_PAGED, BackendEntry, Limit, backend_topk,
                                       build_from, mode_is)


def _draft_tree(mode: str, spec) -> bool:
    return backend_topk(mode, spec) > 1


def _page_size_is_not(*sizes: int):
    return lambda mode, spec: spec.page_size not in sizes


_HALF_ONLY = "its kernels take fp16/bf16 (an MLA deployment serves bf16)"
_FLASHINFER_MLA_TOPK = Limit(_draft_tree, "'Currently Flashinfer MLA only supports topk=1 for speculative decoding' "
                                          "(FlashInferMLAMultiStepDraftBackend, which every EAGLE deployment builds)")

ENTRIES: dict[str, BackendEntry] = {entry.name: entry for entry in (
    BackendEntry(
        name="triton_mla", server_arg="triton", needs_gpu=False, import_check="triton",
        build=build_from("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend",
                         "TritonMultiStepDraftBackend"),
        triton_kernels=True, cg_meta_exact=True,
        graph_buffers=releases.since({
            "0.5.17": TRITON_GRAPH_BUFFERS | TRITON_WINDOW,
            "0.5.19": TRITON_GRAPH_BUFFERS | TRITON_WINDOW | TRITON_LEAN_DECODE,
            "0.5.23": TRITON_GRAPH_BUFFERS | TRITON_WINDOW | TRITON_LEAN_DECODE | {"cuda_graph_uneven_batch"},
        }),
        limits=(NGRAM_PAGED,),
    ),
    BackendEntry(
        name="flashinfer_mla", server_arg="flashinfer", needs_gpu=True, import_check="flashinfer",
        build=build_from("sglang.srt.layers.attention.flashinfer_mla_backend", "FlashInferMLAAttnBackend",
                         "FlashInferMLAMultiStepDraftBackend"),
        dtypes=HALF_PRECISION, dtype_reason=_HALF_ONLY,
        graph_buffers=releases.since({"0.5.17": frozenset({
            "cuda_graph_kv_indices", "cuda_graph_kv_indices[*]", "cuda_graph_qo_indptr", "cuda_graph_kv_indptr",
            "cuda_graph_kv_lens", "cuda_graph_kv_lens[*]", "cuda_graph_kv_indptr[*]", "cuda_graph_qo_indptr[*]",
            # host copies its fast decode plan reads (no device sync at replay)
            "cuda_graph_kv_indptr_cpu", "cuda_graph_qo_indptr_cpu", "fast_decode_kwargs['kv_indices']",
            "fast_decode_kwargs['kv_indptr_cpu']", "fast_decode_kwargs['qo_indptr_cpu']",
        })}),
        limits=(_FLASHINFER_MLA_TOPK,),
        graph_refusals=(("DRAFT_EXTEND_V2", "eagle_worker_v2 captures draft-extend graphs only for its allow-list, "
                                            "which leaves FlashInferMLAAttnBackend out (it runs that forward "
                                            "eagerly; its out_graph raises 'Invalid mode')"),),
    ),
    BackendEntry(
        name="fa3_mla", server_arg="fa3", needs_gpu=True, import_check="sgl_kernel.flash_attn",
        build=build_from("sglang.srt.layers.attention.flashattention_backend", "FlashAttentionBackend",
                         "FlashAttentionMultiStepBackend", fa_impl_ver=3),
        min_capability=(9, 0), dtypes=HALF_PRECISION,
        dtype_reason="FA3 kernels take fp16/bf16 only (sgl_kernel flash_attn dtype check)",
        graph_buffers=releases.since({"0.5.17": FA_GRAPH_BUFFERS | {"_sched_meta_buf"}}), partial_merges=FA_MERGES,
        limits=(NGRAM_PAGED,),
    ),
    BackendEntry(
        name="flashmla", server_arg="flashmla", needs_gpu=True, import_check="flash_mla",
        build=build_from("sglang.srt.layers.attention.flashmla_backend", "FlashMLABackend",
                         "FlashMLAMultiStepDraftBackend"),
        min_capability=(9, 0), dtypes=("bfloat16",), dtype_reason="FlashMLA's dense decode kernel takes bf16 (or fp8 KV)",
        graph_block_table_page=64,  # init_cuda_graph_state: (max_bs, (context + 64) // 64) pages of PAGE_SIZE 64
        graph_buffers=releases.since({"0.5.17": frozenset({
            "cuda_graph_kv_indices", "cuda_graph_mla_metadata", "cuda_graph_num_splits",
            "cuda_graph_draft_extend_seq_lens_k", "_verify_mask.buffer",
        })}),
        limits=(
            Limit(_page_size_is_not(64), "'FlashMLA only supports a page_size of 64' (arg_groups/overrides.py "
                                         "_mla_backend_page_constraints sets it, whatever the user asks)"),
            Limit(_draft_tree, "'Currently FlashMLA only supports topk=1 for speculative decoding' "
                               "(FlashMLAMultiStepDraftBackend)"),
        ),
    ),
    # Blackwell's MLA backends: entries so that every cell names them and says why it does not run here.
    BackendEntry(
        name="trtllm_mla", server_arg="trtllm_mla", needs_gpu=True, import_check="flashinfer",
        build=build_from("sglang.srt.layers.attention.trtllm_mla_backend", "TRTLLMMLABackend",
                         "TRTLLMMLAMultiStepDraftBackend"),
        min_capability=(10, 0),
        capability_reason="'TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). Please use a "
                          "different backend.' (arg_groups/overrides.py _mla_kv_cache_dtype_checks, 0.5.17-0.5.23)",
        dtypes=("bfloat16",), dtype_reason="'TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, "
                                           "bf16, or auto' (the model's bf16 here)",
        limits=(
            Limit(_page_size_is_not(32, 64), "'TensorRT-LLM MLA only supports page_size of 32 or 64' "
                                             "(_mla_backend_page_constraints sets 64 otherwise)"),
            EAGLE_PAGED_TREE, _FLASHINFER_MLA_TOPK,  # its draft backend is FlashInferMLAMultiStepDraftBackend's
        ),
    ),
    BackendEntry(
        name="cutlass_mla", server_arg="cutlass_mla", needs_gpu=True, import_check="sgl_kernel",
        build=build_from("sglang.srt.layers.attention.cutlass_mla_backend", "CutlassMLABackend", "CutlassMLABackend"),
        absent=releases.since({"0.5.17": None, "0.5.20": "sglang 0.5.20 removed --attention-backend cutlass_mla "
                                                          "(no cutlass_mla_backend.py from 0.5.20 on)"}),
        dtypes=("bfloat16",), dtype_reason=_HALF_ONLY,
        limits=(
            Limit(mode_is("spec_algorithm", "EAGLE"),
                  "'EAGLE is not supported in decode attention backend cutlass_mla' (speculative/draft_utils.py "
                  "DraftBackendFactory has no cutlass_mla draft backend, and every EAGLE/MTP worker builds one)"),
            Limit(_page_size_is_not(128), "'Cutlass MLA only supports a page_size of 128' "
                                          "(_mla_backend_page_constraints sets it)"),
        ),
    ),
)}
