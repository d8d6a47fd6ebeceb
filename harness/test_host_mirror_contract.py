"""sglang's needs_cpu_seq_lens decision (PR #26128), checked against the installed code.

The scheduler drops seq_lens_cpu / seq_lens_sum (the GPU-only path) only when
every backend in play opts out. These tests call sglang's own
decide_needs_cpu_seq_lens (through the release's calling convention) with the
real backend classes.
"""

from __future__ import annotations

import pytest

from harness import releases
from harness.sglang_env import scheduler_keeps_host_mirrors, sglang_state


@pytest.fixture(scope="module")
def decide():
    releases.installed()
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend, TritonMultiStepDraftBackend

    with sglang_state(dict(speculative_algorithm="EAGLE", attention_backend="triton")) as server_args:
        def run(slots):
            return scheduler_keeps_host_mirrors(server_args, slots)

        run.opted_out = (TritonAttnBackend, TritonMultiStepDraftBackend)
        yield run


class Undeclared:
    """A backend-like object with no needs_cpu_seq_lens attribute (e.g. an out-of-tree wrapper)."""


def test_host_mirror_contract_opt_out_is_trusted(decide):
    assert decide([cls.__new__(cls) for cls in decide.opted_out]) is False


def test_host_mirror_contract_undeclared_backend_keeps_cpu_mirror(decide):
    assert decide([decide.opted_out[0].__new__(decide.opted_out[0]), Undeclared()]) is True


def test_host_mirror_contract_missing_slot_is_skipped(decide):
    assert decide([None, decide.opted_out[0].__new__(decide.opted_out[0])]) is False
