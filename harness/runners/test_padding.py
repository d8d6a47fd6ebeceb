"""CUDA-graph padding values, as sglang 0.5.17's graph runners pad (harness/runners/padding.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from harness.runners.padding import pad_rows, padded_host_fields


def ints(*values: int, dtype=torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def verify_batch(**fields) -> SimpleNamespace:
    """bs 2, a 3-token window per request."""
    base = dict(batch_size=2, req_pool_indices=ints(5, 2), seq_lens=ints(9, 4),
                positions=ints(9, 10, 11, 4, 5, 6), out_cache_loc=ints(40, 41, 42, 70, 71, 72),
                extend_seq_lens=None, extend_prefix_lens=None, seq_lens_sum=13, seq_lens_cpu=ints(9, 4),
                extend_seq_lens_cpu=None, extend_prefix_lens_cpu=None)
    return SimpleNamespace(**{**base, **fields})


def listed(padded: dict) -> dict:
    return {name: None if value is None else value.tolist() for name, value in padded.items()}


def test_prod_fill_rows():
    assert listed(pad_rows(verify_batch(), capture_bs=4, fill=1, tokens_per_request=3)) == dict(
        req_pool_indices=[5, 2, 0, 0],  # sglang's reserved row 0
        seq_lens=[9, 4, 1, 1],  # the backend's fill value
        positions=[9, 10, 11, 4, 5, 6, 0, 0, 0, 0, 0, 0],
        out_cache_loc=[40, 41, 42, 70, 71, 72, 0, 0, 0, 0, 0, 0],  # the reserved dummy slot
        extend_seq_lens=None, extend_prefix_lens=None,
    )


def test_draft_extend_rows_get_the_full_window_and_no_prefix():
    batch = verify_batch(extend_seq_lens=ints(3, 3, dtype=torch.int32),
                         extend_prefix_lens=ints(6, 1, dtype=torch.int32))
    padded = pad_rows(batch, capture_bs=3, fill=1, tokens_per_request=3)
    assert padded["extend_seq_lens"].tolist() == [3, 3, 3]
    assert padded["extend_prefix_lens"].tolist() == [6, 1, 0]
    assert padded["extend_seq_lens"].dtype == torch.int32


def test_draft_decode_pads_topk_times_steps_slots_per_row():
    """Draft decode: topk 2 tokens per request, out_cache_loc holds topk x num_steps per request."""
    batch = verify_batch(positions=ints(9, 9, 4, 4), out_cache_loc=torch.arange(12))
    padded = pad_rows(batch, capture_bs=3, fill=1, tokens_per_request=2)
    assert padded["positions"].tolist() == [9, 9, 4, 4, 0, 0]
    assert padded["out_cache_loc"].tolist() == [*range(12), 0, 0, 0, 0, 0, 0]


def test_host_fields_with_mirrors():
    batch = verify_batch(extend_seq_lens_cpu=[3, 3], extend_prefix_lens_cpu=[6, 1])
    fields = padded_host_fields(batch, capture_bs=4, fill=1, tokens_per_request=3)
    assert fields["batch_size"] == 4
    assert fields["seq_lens_sum"] == 13 + 2 * 1
    assert fields["seq_lens_cpu"].tolist() == [9, 4, 1, 1]
    assert fields["extend_seq_lens_cpu"] == [3, 3, 3, 3]
    assert fields["extend_prefix_lens_cpu"] == [6, 1, 0, 0]


def test_gpu_only_path_keeps_its_nones():
    fields = padded_host_fields(verify_batch(seq_lens_sum=None, seq_lens_cpu=None), 4, 1, 3)
    assert fields == dict(batch_size=4, seq_lens_sum=None, seq_lens_cpu=None)


def test_no_padding_when_the_batch_fills_the_capture_size():
    batch = verify_batch()
    padded = pad_rows(batch, capture_bs=2, fill=1, tokens_per_request=3)
    assert all(torch.equal(padded[name], getattr(batch, name))
               for name in ("req_pool_indices", "seq_lens", "positions", "out_cache_loc"))
    assert padded_host_fields(batch, 2, 1, 3)["seq_lens_sum"] == 13
