"""The batches of DFlash and frozen-KV MTP, field by field, against what their workers pass (sglang
0.5.17-0.5.23): dflash_worker_v2.DFlashWorkerV2.forward_batch_generation and
frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker.draft. The cells compare outputs; these tests pin
the fields a backend reads, so a fixture drifting from the contract fails here by name.
"""

from __future__ import annotations

import pytest
import torch

from harness.families import BACKENDS
from harness.case.cases import spec_from_fields
from harness.modes import MODES
from harness.modes.dflash_verify import RESERVED_LEN
from harness.cell.run_cell import built_backend

SHAPE = dict(num_heads=4, num_kv_heads=2, head_dim=64)


def batch_of(mode_name: str, **fields):
    """The mode's ForwardBatch and step views for a small case, built on real pools (no forward runs)."""
    spec = spec_from_fields(dict(name="contract", **SHAPE, **fields))
    mode = MODES[mode_name]
    with built_backend([spec], mode, BACKENDS["triton"], extra_rows=0) as (states, _, backend):
        state = states[0]
        batch = mode.forward_batch(state, mode.steps(spec))
        views = mode.step_views(backend, batch)
    return spec, state, batch, views


def listed(tensor: torch.Tensor) -> list[int]:
    return tensor.tolist()


@pytest.mark.parametrize("mode_name", ["dflash_verify", "dflash_draft"])
def test_dflash_host_mirror_counts_the_block_while_seq_lens_does_not(mode_name):
    spec, state, batch, _ = batch_of(mode_name, bs=2, prefix_lens=[9, 30], input_lens=4)
    assert batch.forward_mode.is_target_verify() and batch.spec_algorithm.is_dflash()
    assert listed(batch.seq_lens) == [9, 30]  # the committed prefix
    assert listed(batch.seq_lens_cpu) == [13, 34] and batch.seq_lens_sum == 47  # prefix + block
    assert listed(batch.positions) == [9, 10, 11, 12, 30, 31, 32, 33]
    writes = [(r, p + j) for r, p in enumerate(spec.prefix_lens) for j in range(4)]
    assert listed(batch.out_cache_loc) == listed(state.layout.slots_at(writes))
    info = batch.spec_info
    assert info.custom_mask is None and info.topk == 1 and info.draft_token_num == 4
    assert info.num_tokens_per_req == 4


@pytest.mark.parametrize("mode_name", ["dflash_verify", "dflash_draft"])
def test_dflash_gpu_only_mirror_is_the_reservation(mode_name):
    spec, state, batch, _ = batch_of(mode_name, bs=2, prefix_lens=[9, 30], input_lens=4, page_size=16,
                                     host_mirrors="gpu_only")
    reserved = [RESERVED_LEN.value(p, 4, 16) for p in spec.prefix_lens]
    assert listed(batch.seq_lens) == [9, 30]
    assert listed(batch.seq_lens_cpu) == reserved and batch.seq_lens_sum == sum(reserved)
    assert [len(slots) for slots in state.layout.row_slots] == reserved  # the rows hold the reservation


def test_dflash_verify_and_draft_inputs_are_the_workers():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative.spec_info import SpecInputType

    _, _, verify, _ = batch_of("dflash_verify", bs=1, prefix_lens=[5], input_lens=3)
    _, _, draft, _ = batch_of("dflash_draft", bs=1, prefix_lens=[5], input_lens=3)
    assert verify.spec_info.spec_input_type == draft.spec_info.spec_input_type == SpecInputType.DFLASH_VERIFY
    assert verify.spec_info.capture_hidden_mode == CaptureHiddenMode.FULL
    assert draft.spec_info.capture_hidden_mode == CaptureHiddenMode.NULL
    assert verify.seq_lens_cpu.dtype == torch.int64 and draft.seq_lens_cpu.dtype == torch.int32


@pytest.mark.parametrize("host_mirrors", ["full", "gpu_only"])
def test_frozen_kv_mtp_draft_batch_is_topk_rows_a_request_writing_nothing(host_mirrors):
    from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput

    spec, state, batch, views = batch_of("frozen_kv_mtp_draft", bs=2, prefix_lens=[7, 1], topk=3, num_steps=2,
                                         host_mirrors=host_mirrors)
    rows = state.layout.req_pool_indices
    assert batch.forward_mode.is_decode() and batch.spec_algorithm.is_frozen_kv_mtp()
    assert batch.batch_size == 6 and listed(batch.req_pool_indices) == [rows[0]] * 3 + [rows[1]] * 3
    assert listed(batch.seq_lens) == [7, 7, 7, 1, 1, 1] and listed(batch.positions) == [6, 6, 6, 0, 0, 0]
    assert batch.seq_lens_sum == 24  # never None: summed from the device lengths without a mirror
    assert (batch.seq_lens_cpu is None) == (host_mirrors == "gpu_only")
    assert batch.out_cache_loc is None and batch.spec_info is None  # metadata is built with spec_info None
    assert len(views) == spec.num_steps
    assert all(isinstance(view.spec_info, FrozenKVMTPDraftInput) and view.spec_info.num_tokens_per_req == 3
               for _, view in views)


def test_frozen_kv_mtp_verify_input_is_its_own_eagle_verify_input():
    from sglang.srt.speculative.eagle_info import EagleVerifyInput
    from sglang.srt.speculative.spec_info import SpecInputType

    _, _, batch, _ = batch_of("frozen_kv_mtp_verify", bs=2, prefix_lens=[4, 9], topk=2, input_lens=5)
    info = batch.spec_info
    assert isinstance(info, EagleVerifyInput) and info.spec_input_type == SpecInputType.FROZEN_KV_MTP_VERIFY
    assert batch.spec_algorithm.is_frozen_kv_mtp() and listed(batch.seq_lens) == [4, 9]
    assert info.custom_mask.numel() == 5 * (4 + 5) + 5 * (9 + 5)
