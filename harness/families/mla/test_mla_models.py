"""The served models' softmax scale, computed from their configs here, agrees with sglang's own
(configs/model_config.py compute_mla_mscale_scaling, what DeepseekV2AttentionMLA gives its layer),
and the head and shape rules refuse what no deployment runs."""

from __future__ import annotations

import pytest

from harness.families.mla.models import MODELS


@pytest.mark.parametrize("name", MODELS)
def test_the_scale_is_sglangs(name):
    from sglang.srt.configs.model_config import compute_mla_mscale_scaling

    model = MODELS[name]
    rope_scaling = dict(type="yarn", factor=model.yarn_factor, mscale=model.yarn_mscale_all_dim,
                        mscale_all_dim=model.yarn_mscale_all_dim, original_max_position_embeddings=4096)
    base = (model.qk_nope_head_dim + model.qk_rope_head_dim) ** -0.5
    assert model.scale == pytest.approx(compute_mla_mscale_scaling(rope_scaling, base), rel=1e-12)


def test_deepseek_v3_figures():
    """The numbers the configs give (192 ** -0.5 * (0.1 ln 40 + 1) ** 2), so a wrong field shows."""
    assert MODELS["deepseek-v3"].scale == pytest.approx(0.1352337789, rel=1e-9)
    assert MODELS["kimi-k2"].scale == pytest.approx(0.1308608000, rel=1e-9)
    assert MODELS["deepseek-v3"].cache_dim == 576


@pytest.mark.parametrize("heads, ok", [(16, True), (128, True), (1, True), (3, False), (256, False)])
def test_heads_are_a_gpus_share(heads, ok):
    assert (MODELS["deepseek-v3"].heads_problem(heads) is None) == ok
