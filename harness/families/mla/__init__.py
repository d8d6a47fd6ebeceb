"""Multi-head latent attention (MLA): DeepSeek-V2/V3, R1 and Kimi-K2's attention, the family most
speculative decoding (MTP: EAGLE over the NextN layer) is served with.

Each token caches one latent row, [c_kv (kv_lora_rank), k_pe (qk_rope_head_dim)], in sglang's
MLATokenToKVPool; the layer the model builds for the absorbed path (models/deepseek_v2.py
attn_mqa) is RadixAttention(local heads, kv_lora_rank + rope, scale, num_kv_heads=1,
v_head_dim=kv_lora_rank). In every speculative mode (target verify, draft extend, draft decode)
the model takes that absorbed path on all four Hopper backends (deepseek_common
attention_backend_handler: only EXTEND without speculation may take the MHA path), and hands the
backend one of two forms (forward_mla.py forward_absorb_core):

- split, for the backends in sglang's FORWARD_ABSORB_CORE_ATTENTION_BACKENDS (fa3, flashinfer):
  q = the absorbed query [T, H, rank], k = v = the latent [T, 1, rank], q_rope / k_rope apart;
- concatenated, for the others (triton, flashmla): q [T, H, rank + rope], k [T, 1, rank + rope],
  v = the latent [T, 1, rank].

Which form a backend gets is read from that sglang list, never kept here. The harness draws q and
the cache rows at random (the absorption and the rope are the model's, before attention), writes
the prefix as the pool stores it, and judges the output [T, H, rank] with the float64 oracle in
``reference``.

May import: base, checks, modes, fixtures.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from harness.base.case_spec import CaseSpec
from harness.checks.compare import census_heads
from harness.checks.reference import census_parts
from harness.families.base import LayerShape
from harness.families.mla.backends import ENTRIES
from harness.families.mla.models import MODELS
from harness.families.mla.reference import mla_reference
from harness.fixtures import sglang_env
from harness.fixtures.pools import BatchState, StepInputs, build_req_to_token, draw_forward, draw_generator

# What a dense case's head fields default to: an MLA case takes its dims from its model and leaves them be.
_DENSE_SHAPE_FIELDS = {name: CaseSpec.model_fields[name].default for name in ("num_kv_heads", "head_dim")}


def _model(spec: CaseSpec):
    return MODELS[spec.model]


def splits_rope(server_arg: str) -> bool:
    """Does the model hand this backend q_rope / k_rope apart (the split form)? sglang's own list says."""
    from sglang.srt.models.deepseek_common.utils import FORWARD_ABSORB_CORE_ATTENTION_BACKENDS

    return server_arg in FORWARD_ABSORB_CORE_ATTENTION_BACKENDS


class MlaFamily:
    name = "mla"
    case_folder = "mla"
    backends = ENTRIES
    unserved_modes = {
        **dict.fromkeys(("frozen_kv_mtp_verify", "frozen_kv_mtp_draft"),
                        "sglang serves frozen-KV MTP for Gemma 4's MTP draft only (models/gemma4_mtp.py, the one "
                        "model with a frozen-KV draft); no MLA model has one"),
        "dflash_draft": "DFlash drafters are dense models (models/dflash.py); an MLA model meets DFlash as the "
                        "target that verifies the block (dflash_verify)",
    }

    def shape(self, spec: CaseSpec) -> LayerShape:
        model = _model(spec)
        return LayerShape(spec.num_heads, 1, model.cache_dim, model.kv_lora_rank, model.scale, pool_dims=model.cache_dim)

    def triton_kv_splits(self, spec: CaseSpec, setting: int, sm_count: int) -> int:
        """TritonAttnBackend raises an MLA model's max_kv_splits by sglang's own rule
        (_mla_decode_kv_splits_cap, both releases): up to the SM count rounded up to a power of two, within
        the context's 32-token blocks; 256 on an H100/H200 from a 4K context, the setting on a CPU (no SMs).
        Every decode-kernel logits buffer grows with it. Without SMs the rule's first line keeps the setting;
        asked here first, so that loading case files off a GPU does not import Triton's backend (7 s)."""
        if sm_count <= 0:
            return setting
        from sglang.srt.layers.attention.triton_backend import _mla_decode_kv_splits_cap

        return _mla_decode_kv_splits_cap(setting, sm_count, spec.model_context_len)

    def validate(self, spec: CaseSpec) -> str | None:
        if spec.model not in MODELS:
            return f"model: {spec.model!r} is no served MLA model here; valid: {', '.join(MODELS)}"
        for field, default in _DENSE_SHAPE_FIELDS.items():
            if getattr(spec, field) != default:
                return (f"{field}: an MLA layer caches one latent head of kv_lora_rank + qk_rope_head_dim "
                        f"({_model(spec).cache_dim} for {spec.model}); leave {field} out")
        if spec.sliding_window:
            return "sliding_window: the MLA models served here have no sliding-window layers"
        return _model(spec).heads_problem(spec.num_heads)

    def build_state(self, spec: CaseSpec, layout, row_lens: list[int], device: str, server_args) -> BatchState:
        """sglang's MLATokenToKVPool as the model runner builds it (kv_cache_configurator: the model's
        kv_lora_rank and qk_rope_head_dim), every slot NaN but sglang's padding page, the prefix
        written as the pool stores a token (latent then rope key in one row)."""
        from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

        model, dtype = _model(spec), getattr(torch, spec.dtype)
        req_to_token = build_req_to_token(spec, layout, device, server_args)
        kv = MLATokenToKVPool(size=layout.pool_slots, page_size=spec.page_size, dtype=dtype,
                              kv_lora_rank=model.kv_lora_rank, qk_rope_head_dim=model.qk_rope_head_dim,
                              layer_num=1, device=device, enable_memory_saver=False)
        cache = kv.kv_buffer[0]
        cache.fill_(float("nan"))
        cache[: spec.page_size] = 0  # sglang's padding page: padded rows read it
        row_cache = [torch.full((n, 1, model.cache_dim), float("nan"), dtype=dtype, device=device) for n in row_lens]
        state = BatchState(spec, layout, device, SimpleNamespace(req_to_token=req_to_token, kv=kv,
                                                                 context_len=spec.model_context_len),
                           row_cache, [row[..., : model.kv_lora_rank] for row in row_cache],
                           draw_generator(device, spec.seed), (cache,))
        for request, prefix in enumerate(spec.prefix_lens):
            rows = state.randn(prefix, 1, model.cache_dim)
            row_cache[request][:prefix] = rows
            cache[layout.row_slots[request][:prefix].to(device)] = rows
        return state

    def draw_inputs(self, state: BatchState, steps, shape: LayerShape, census_splits) -> list[StepInputs]:
        """Each step's absorbed query and new cache rows, and the oracle's answer, in step order.

        ``row_v`` is a view of the cache rows' latent (BatchState.record_new_kv writes both), and V
        is the latent the model passes: no second copy to drift. The key-census head (the last) gets
        q = 0 as in the dense family.
        """
        rank = shape.v_head_dim
        drawn = []
        def new_rows(tokens: int):
            rows = state.randn(tokens, 1, shape.qk_head_dim)
            return rows, rows[..., :rank].contiguous()

        for step in steps:
            q, k, v = draw_forward(state, step, shape.num_heads, shape.qk_head_dim, new_rows)
            expected = mla_reference(q, step.queries, state.row_k, rank, shape.scale)
            # the census head's parts are plain means of the latent (q = 0): the dense census over V alone
            census = (census_parts(step.queries, state.spec.prefix_lens, state.row_v, state.row_v, 0,
                                   state.spec.page_size, census_splits)
                      if census_splits and census_heads(shape.num_heads) else {})
            drawn.append(StepInputs(q.reshape(len(step.queries), -1), k, v, expected, census))
        return drawn

    def forward(self, server_arg: str, backend, q, k, v, layer, forward_batch, save_kv_cache: bool):
        """As RadixAttention hands the backend what forward_absorb_core passes for ``server_arg``."""
        if not splits_rope(server_arg):
            return backend.forward(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache)
        rank = layer.v_head_dim
        query = q.view(q.shape[0], layer.tp_q_head_num, layer.qk_head_dim)
        latent = None if k is None else k[..., :rank].contiguous()
        return backend.forward(query[..., :rank].contiguous(), latent, latent, layer, forward_batch,
                               save_kv_cache=save_kv_cache, q_rope=query[..., rank:].contiguous(),
                               k_rope=None if k is None else k[..., rank:].contiguous())

    def runner_fields(self, spec: CaseSpec, context_len: int) -> dict:
        return dict(model_config=model_config(spec, context_len), use_mla_backend=True)


def model_config(spec: CaseSpec, context_len: int) -> SimpleNamespace:
    """A DeepSeek-architecture config of the case's model and heads; ``num_key_value_heads`` is the
    query heads' count, as DeepSeek's config.json gives it (the latent's one cached head is the pool's)."""
    import transformers
    from sglang.srt.configs.model_config import AttentionArch

    model = _model(spec)
    hf_config = transformers.DeepseekV3Config(
        num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_heads, kv_lora_rank=model.kv_lora_rank,
        qk_nope_head_dim=model.qk_nope_head_dim, qk_rope_head_dim=model.qk_rope_head_dim,
        v_head_dim=model.v_head_dim, num_hidden_layers=1, max_position_embeddings=context_len,
        architectures=["DeepseekV3ForCausalLM"])
    return sglang_env.model_config_of(
        spec, context_len, hf_config, spec.num_heads, attention_arch=AttentionArch.MLA,
        kv_lora_rank=model.kv_lora_rank, qk_nope_head_dim=model.qk_nope_head_dim,
        qk_rope_head_dim=model.qk_rope_head_dim, v_head_dim=model.v_head_dim,
        head_dim=256,  # sglang's ModelConfig gives DeepSeek models this placeholder (model_config.py)
        scaling=model.scale)  # FlashInfer MLA plans with it: it must be the layer's scale


FAMILY = MlaFamily()
