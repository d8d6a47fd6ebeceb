"""The states a case may stand in come from the scheduler's rules, checked here against a brute force
of those rules and against sglang's own allocation, never against its pool sizing.

A brute force walks prompts, max_new_tokens and runs of accepted tokens through the scheduler's rules
(init_req_max_new_tokens's clamp, a finished request runs no step, the overlap scheduler builds the
next batch before the step in flight is processed) and records, for every step a request runs, the
committed length it runs on and the committed length its batch was built (and reserved) on.
"""

from __future__ import annotations

import itertools

import pytest

from harness.case.cases import spec_from_fields
from harness.modes import MODES
from harness.base.releases import installed
from harness.modes.scheduler_rules import batch_committed, decode_reserve, max_committed_prefix, reserved_row_len
from harness.fixtures.sglang_env import server_fields, sglang_state


def scheduled_steps(context_len: int, most: int, overlap: bool, skips_finishing: bool):
    """Every (committed length a step runs on, committed length its batch was built on) the rules allow."""
    max_req_len = context_len - 1
    for prompt in range(1, 6):
        limit = max_req_len - prompt - 1  # Scheduler.init_req_max_new_tokens's clamp of max_new_tokens
        for accepts in itertools.product(range(1, most + 1), repeat=4):  # tokens each step commits
            processed, committed, in_flight = 1, prompt, None  # after prefill: one output, the prompt in the KV
            steps = itertools.cycle(accepts)
            while processed < limit and not (in_flight and skips_finishing and processed + 1 >= limit):
                yield committed, prompt + processed - 1  # the batch holds what the scheduler has processed
                accepted = next(steps)
                committed += accepted
                if overlap:  # the step before this one is processed once this one is launched
                    processed, in_flight = processed + (in_flight or 0), accepted
                else:
                    processed += accepted


@pytest.mark.parametrize("release, skips_finishing", [("0.5.17", False), ("0.5.22", True)])
@pytest.mark.parametrize("most", [1, 2, 4, 8])
def test_the_wall_and_the_batch_a_step_is_reserved_on_are_the_schedulers(most, release, skips_finishing):
    context_len = 64
    steps = [step for overlap in (False, True) for step in scheduled_steps(context_len, most, overlap, skips_finishing)]
    assert max(committed for committed, _ in steps) == max_committed_prefix(context_len, most, release)
    built = {}
    for committed, batch in steps:
        built[committed] = max(built.get(committed, 0), batch)
    assert built == {committed: batch_committed(committed, context_len, release) for committed in built}


def test_a_wall_past_the_context_is_kept_not_capped_by_the_row():
    """Steps of 6 or more tokens commit past the context; nothing the pools hold bounds that."""
    assert max_committed_prefix(4096, 8, "0.5.23") == 4099
    assert max_committed_prefix(4096, 17, "0.5.23") == 4108  # 16 steps: 12 past, whatever a row holds
    assert reserved_row_len(4095, 4096, 24, 1, "0.5.23") == 4091 + 24  # built one step earlier, under overlap
    assert reserved_row_len(4092, 4096, 24, 16, "0.5.23") == 4128  # without overlap, on itself; whole pages


SHAPES = {
    "chain-page1": ("target_verify", dict(topk=1, num_steps=3, input_lens=4, page_size=1)),
    "tree-page1": ("target_verify", dict(topk=4, num_steps=3, input_lens=8, page_size=1)),
    "tree-page16": ("target_verify", dict(topk=2, num_steps=3, input_lens=6, page_size=16)),
    "draft-page64": ("draft_decode", dict(topk=8, num_steps=7, page_size=64)),
    "ngram-page16": ("ngram_verify", dict(topk=1, num_steps=3, input_lens=12, page_size=16)),
    "frozen-tree": ("frozen_kv_mtp_verify", dict(topk=4, num_steps=3, input_lens=8, page_size=16)),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_decode_reserve_is_what_sglangs_scheduler_reserves(shape):
    """The harness derives the reserve from the server arguments; sglang's allocation rule agrees."""
    mode_name, fields = SHAPES[shape]
    mode = MODES[mode_name]
    spec = spec_from_fields(dict(name="s", bs=1, prefix_lens=[9], **fields))
    with sglang_state(server_fields(spec, "triton", mode.speculative_args(spec))) as server_args:
        from sglang.srt.mem_cache.allocation_sizing import get_alloc_reserve_per_decode

        try:
            sglang_reserve = get_alloc_reserve_per_decode()
        except TypeError:  # sglang 0.5.17-0.5.18 take the server args
            sglang_reserve = get_alloc_reserve_per_decode(server_args)
    assert decode_reserve(mode, spec) == sglang_reserve, installed().version
