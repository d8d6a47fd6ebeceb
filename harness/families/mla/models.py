"""The served MLA models whose attention the MLA cells compute: latent dims, heads, softmax scale.

Values are the models' config.json fields (DeepSeek-V3 and R1 share every attention field; Kimi-K2
is DeepSeek-V3's architecture with 64 heads and YaRN factor 32; DeepSeek-V2-Lite as its Lite-Chat
config gives it). A case names the model and the heads one GPU runs (``num_heads``): sglang splits
the heads over the attention tensor-parallel ranks, num_heads // attn_tp_size
(models/deepseek_v2.py DeepseekV2AttentionMLA), so TP8 puts 1/8 of them on a GPU and DP attention
all of them.

The scale is the model's, computed here from the config (never asked from sglang, whose number the
backend gets through the layer; test_mla_models.py checks the two agree): the query-key head dim
(qk_nope + qk_rope, not the 576 the absorbed product runs over) to the power -0.5, times YaRN's
attention factor squared, yarn_get_mscale(factor, mscale_all_dim) ** 2 with
yarn_get_mscale(s, m) = 0.1 * m * ln(s) + 1 for s > 1 (DeepSeek-V2's reference modelling code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class MlaModel:
    name: str
    num_heads: int  # num_attention_heads of the whole model
    kv_lora_rank: int  # the latent c_kv each token caches: the absorbed V and the K's first part
    qk_nope_head_dim: int
    qk_rope_head_dim: int  # the rope key each token caches after its latent
    v_head_dim: int  # per head after the up-projection (the unabsorbed V)
    yarn_factor: float  # rope_scaling.factor (1: no YaRN)
    yarn_mscale_all_dim: float  # rope_scaling.mscale_all_dim
    source: str

    @property
    def cache_dim(self) -> int:
        """What one token caches: the latent and the rope key, kv_lora_rank + qk_rope_head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def scale(self) -> float:
        mscale = 0.1 * self.yarn_mscale_all_dim * math.log(self.yarn_factor) + 1.0 if self.yarn_factor > 1 else 1.0
        return (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5 * mscale * mscale

    def heads_problem(self, num_heads: int) -> str | None:
        """Why ``num_heads`` is no GPU's share of this model's heads, or None."""
        if num_heads < 1 or self.num_heads % num_heads:
            shares = [self.num_heads // tp for tp in (1, 2, 4, 8, 16) if self.num_heads % tp == 0]
            return (f"num_heads: {num_heads} is not {self.name}'s {self.num_heads} heads split over attention "
                    f"tensor-parallel ranks (one GPU runs num_heads // attn_tp_size: {shares} for TP 1..16)")
        return None


_DEEPSEEK_V3 = dict(num_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                    yarn_factor=40.0, yarn_mscale_all_dim=1.0)

MODELS: dict[str, MlaModel] = {model.name: model for model in (
    MlaModel("deepseek-v3", **_DEEPSEEK_V3, source="deepseek-ai/DeepSeek-V3 config.json"),
    MlaModel("deepseek-r1", **_DEEPSEEK_V3, source="deepseek-ai/DeepSeek-R1 config.json (V3's attention)"),
    MlaModel("kimi-k2", num_heads=64, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
             yarn_factor=32.0, yarn_mscale_all_dim=1.0, source="moonshotai/Kimi-K2-Instruct config.json"),
    MlaModel("deepseek-v2-lite", num_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
             v_head_dim=128, yarn_factor=40.0, yarn_mscale_all_dim=0.707,
             source="deepseek-ai/DeepSeek-V2-Lite-Chat config.json"),
)}
