"""sglang's process-wide state and the model-runner stand-in a backend is built from.

Backends read server args and parallel topology through sglang's global
getters, and a handful of attributes off ``model_runner``. We set the former
through sglang's own test-override helpers and give the latter as plain data:
only what backends read, listed in one place.
"""

from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace
from typing import Iterator

from harness.case_spec import CaseSpec
from harness.releases import since

SINGLE_RANK = dict(tp_size=1, tp_rank=0, attn_tp_size=1, attn_tp_rank=0,
                   attn_dcp_size=1, attn_dcp_rank=0, dcp_size=1, dcp_rank=0,
                   attn_cp_size=1, attn_cp_rank=0, attn_dp_size=1, attn_dp_rank=0)


def server_fields(spec: CaseSpec, backend_arg: str, speculative: dict) -> dict:
    """Server args as a speculative-decoding deployment of this case would set them.

    ``speculative`` is the mode's own algorithm, topk, steps and draft-token count
    (SpecMode.speculative_args), as sglang's argument hooks resolve them.
    """
    # The draft window / sink fields exist only from sglang 0.5.21 on (the sink field), so they
    # are set only by cases that use them, which backend entries skip on older releases.
    window = {} if not spec.draft_window else dict(speculative_draft_window_size=spec.draft_window,
                                                     speculative_draft_sink_size=spec.draft_sink)
    return dict(
        **window,
        attention_backend=backend_arg,
        page_size=spec.page_size,
        disable_cuda_graph=True,
        chunked_prefill_size=-1,
        **speculative,
        triton_attention_num_kv_splits=8,
        kv_cache_dtype="auto",
    )


@contextlib.contextmanager
def sglang_state(fields: dict) -> Iterator[object]:
    """Install server args + single-rank parallel state; restore them afterwards."""
    from sglang.srt.runtime_context import get_context, get_parallel

    override = get_context().override_server_args(**fields)
    server_args = override.install()
    try:
        with get_parallel().override(**SINGLE_RANK):
            yield server_args
    finally:
        override.restore()


def layer_sliding_window(spec: CaseSpec) -> int | None:
    """The layer's sliding_window_size for the case's model window, or None without one.

    Asked from sglang's Gemma 2 model code (models/gemma2.py get_attention_sliding_window_size:
    the HF sliding_window minus one), which gives the same number to RadixAttention and, through
    the model, to model_runner.sliding_window_size. Gemma 2/3 run without the hybrid SWA pool
    (sglang's gemma2_gemma3 overrides set disable_hybrid_swa_memory), so the pools stay the
    ordinary ones.
    """
    if not spec.sliding_window:
        return None
    from sglang.srt.models.gemma2 import get_attention_sliding_window_size

    return get_attention_sliding_window_size(SimpleNamespace(sliding_window=spec.sliding_window))


def model_config(spec: CaseSpec, context_len: int) -> SimpleNamespace:
    import torch
    import transformers
    from sglang.srt.configs.model_config import AttentionArch

    hf_config = transformers.LlamaConfig(
        num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
        hidden_size=spec.num_heads * spec.head_dim, head_dim=spec.head_dim,
        num_hidden_layers=1, max_position_embeddings=context_len,
        architectures=["LlamaForCausalLM"],
    )
    return SimpleNamespace(
        attention_arch=AttentionArch.MHA,
        get_max_num_attention_heads=lambda: spec.num_heads,
        get_num_kv_heads=lambda tp_size, dcp_size=1: spec.num_kv_heads // (tp_size // dcp_size),
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        v_head_dim=spec.head_dim,
        swa_v_head_dim=None,
        context_len=context_len,
        is_encoder_decoder=False,
        is_multimodal=False,
        is_local_attention_model=False,
        is_hybrid_swa=False,
        hf_config=hf_config,
        hf_text_config=hf_config,
        linear_attn_registry_result=None,
        num_hidden_layers=1,
        dtype=getattr(torch, spec.dtype),
    )


def _trivial_parallel_state(runner: SimpleNamespace) -> None:
    """Up to 0.5.20: backends read the parallel topology off model_runner.ps."""
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState

    runner.ps = ParallelState.trivial()


# sglang's own ModelRunner methods are bound to the stand-in, so what they compute
# (the KV index translator, logits rows per request) is sglang's, not a copy.
def _kv_index_translator(runner: SimpleNamespace) -> None:
    """0.5.19+: backends build read indices from model_runner.kv_index_translator."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    ModelRunner.init_kv_index_translator(runner)


def _tokens_per_request(runner: SimpleNamespace) -> None:
    """0.5.21+: Triton sizes its verify buffers with model_runner.decode_num_tokens_per_req()."""
    from types import MethodType

    from sglang.srt.model_executor.model_runner import ModelRunner

    runner.decode_num_tokens_per_req = MethodType(ModelRunner.decode_num_tokens_per_req, runner)


# What the stand-in must carry beyond the common attributes, per release (bisected over the wheels).
STAND_IN_EXTRAS = since({
    "0.5.17": (_trivial_parallel_state,),
    "0.5.19": (_trivial_parallel_state, _kv_index_translator),
    "0.5.21": (_kv_index_translator, _tokens_per_request),
})


def model_runner(spec: CaseSpec, pools: SimpleNamespace, server_args, device: str,
                 is_draft_worker: bool, algorithm: str) -> SimpleNamespace:
    import torch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    dtype = getattr(torch, spec.dtype)
    runner = SimpleNamespace(
        req_to_token_pool=pools.req_to_token,
        token_to_kv_pool=pools.kv,
        token_to_kv_pool_allocator=SimpleNamespace(page_size=spec.page_size,
                                                   get_kvcache=lambda: pools.kv),
        sliding_window_size=layer_sliding_window(spec),
        page_size=spec.page_size,
        model_config=model_config(spec, pools.context_len),
        device=device,
        gpu_id=0,
        server_args=server_args,
        is_draft_worker=is_draft_worker,
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm),
        kv_cache_dtype=dtype,
        kv_cache_dtype_str="auto",
        dtype=dtype,
        is_hybrid_swa=False,
        attention_chunk_size=None,
        use_mla_backend=False,
        init_new_workspace=False,
        plan_stream_for_flashinfer=None,
        canary_manager=None,
        attn_cp_size=1,  # 0.5.21's FA3 reads the context-parallel size off the model runner
        # 0.5.23's FlashInfer reads which backend serves prefill and decode (hybrid setups).
        prefill_attention_backend_str=server_args.attention_backend,
        decode_attention_backend_str=server_args.attention_backend,
    )
    for extra in STAND_IN_EXTRAS.value:
        extra(runner)
    return runner


def _decide_with_server_args(server_args, backend_slots: list) -> bool:
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    return decide_needs_cpu_seq_lens(server_args, backend_slots)


def _decide_from_context(server_args, backend_slots: list) -> bool:
    """Newer releases read the server args from sglang's runtime context."""
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    return decide_needs_cpu_seq_lens(backend_slots)


_NEEDS_CPU_SEQ_LENS = since({"0.5.17": _decide_with_server_args, "0.5.19": _decide_from_context})


def scheduler_keeps_host_mirrors(server_args, backend_slots: list) -> bool:
    """sglang's own decision (PR #26128): does the scheduler keep seq_lens_cpu / seq_lens_sum?

    Asked, never re-implemented: the harness runs a GPU-only variant only where
    this says the scheduler drops the mirrors for the backends in play.
    """
    return _NEEDS_CPU_SEQ_LENS.value(server_args, backend_slots)


def _capture_sizes_on_server_args(fields, max_bs: int) -> list[int]:
    from sglang.srt.server_args import ServerArgs

    return ServerArgs._generate_decode_cuda_graph_batch_sizes(fields, max_bs)


def _capture_sizes_from_hook(fields, max_bs: int) -> list[int]:
    """0.5.19+: the capture sizes moved to arg_groups/cuda_graph_hook.py."""
    from sglang.srt.arg_groups.cuda_graph_hook import generate_decode_cuda_graph_batch_sizes

    return generate_decode_cuda_graph_batch_sizes(fields, max_bs)


_DECODE_CAPTURE_SIZES = since({"0.5.17": _capture_sizes_on_server_args, "0.5.19": _capture_sizes_from_hook})


@functools.lru_cache(maxsize=None)
def decode_capture_sizes(max_bs: int) -> list[int]:
    """The decode CUDA-graph batch sizes sglang captures under speculative decoding, up to ``max_bs``.

    Asked from sglang (padding on, an EAGLE deployment): a batch is padded to the smallest size
    >= its bs, and a batch above the largest runs eagerly.
    """
    fields = SimpleNamespace(disable_cuda_graph_padding=False, speculative_algorithm="EAGLE")
    return _DECODE_CAPTURE_SIZES.value(fields, max_bs)
