"""Pools are sized as sglang's model runner sizes them, on every release the venv holds.

sglang's KVCacheConfigurator builds the req_to_token pool with the model's context length
plus a speculative headroom; harness/pools.py asks sglang for that headroom. These tests
build the pool with sglang's own configurator method on a stand-in and compare widths, so a
release whose configurator sizes differently fails here first.
"""

from __future__ import annotations

from types import MethodType, SimpleNamespace

import pytest

from harness.case_spec import DEFAULT_MODEL_CONTEXT_LEN
from harness.cases import spec_from_fields
from harness.modes import MODES
from harness.pools import req_to_token_width
from harness.sglang_env import server_fields, sglang_state

SHAPES = {  # (mode, fields): the page-aligned reserve only applies with pages and a tree
    "chain-page1": ("target_verify", dict(topk=1, page_size=1, input_lens=4)),
    "tree-page64": ("target_verify", dict(topk=4, page_size=64, input_lens=8)),
    "decode-page16": ("draft_decode", dict(topk=8, num_steps=7, page_size=16)),
    "ngram-page16": ("ngram_verify", dict(topk=1, page_size=16, input_lens=12)),
}


def _configurator_width(context_len: int, server_args) -> int:
    """What sglang's own KVCacheConfigurator._build_req_to_token_pool gives a row (inside sglang_state)."""
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    stand_in = SimpleNamespace(model_config=SimpleNamespace(context_len=context_len, hf_config=None),
                               mambaish_config=None, device="cpu", server_args=server_args)
    stand_in._build_default_req_pool = MethodType(KVCacheConfigurator._build_default_req_pool, stand_in)
    return KVCacheConfigurator._build_req_to_token_pool(stand_in, max_num_reqs=2).req_to_token.shape[1]


@pytest.mark.parametrize("shape", SHAPES)
def test_req_to_token_width_is_the_configurators(shape):
    mode_name, fields = SHAPES[shape]
    spec = spec_from_fields(dict(name="s", bs=2, prefix_lens=[0, 9], context_len=2048, **fields))
    mode = MODES[mode_name]
    with sglang_state(server_fields(spec, "triton", mode.speculative_args(spec))) as server_args:
        expected = _configurator_width(spec.model_context_len, server_args)
        assert req_to_token_width(spec, server_args) == expected
    # Speculative headroom beyond the context, at least the draft tokens (sglang's base rule).
    assert expected >= 2048 + 4 + mode.num_draft_tokens(spec)


def test_page_reserve_outgrows_the_base_headroom():
    """With pages and a tree, the headroom is the double-buffered page-aligned reserve (sglang #26097's fix)."""
    spec = spec_from_fields(dict(name="s", bs=1, prefix_lens=[3], input_lens=8, topk=4, page_size=64))
    mode = MODES["target_verify"]
    with sglang_state(server_fields(spec, "triton", mode.speculative_args(spec))) as server_args:
        headroom = req_to_token_width(spec, server_args) - spec.model_context_len
    assert headroom == 2 * 2 * 64 * 4 + 64 - 1  # 2 x (2 pages per branch x 64 x topk 4) + page - 1


@pytest.mark.parametrize("prefixes, expected", [([0], DEFAULT_MODEL_CONTEXT_LEN), ([4092], 4096),
                                                 ([4093], 8192), ([5, 20000], 32768)])
def test_derived_context_never_just_fits(prefixes, expected):
    spec = spec_from_fields(dict(name="s", bs=len(prefixes), prefix_lens=prefixes, input_lens=4))
    assert spec.model_context_len == expected


def test_stated_context_is_the_models():
    spec = spec_from_fields(dict(name="s", bs=1, prefix_lens=[99], input_lens=4, context_len=100))
    assert spec.model_context_len == 100
