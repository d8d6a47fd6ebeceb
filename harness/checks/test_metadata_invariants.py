"""Positive controls for the metadata invariants: each broken rule raises, naming field and values."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from harness.checks.guards import Guards
from harness.checks.invariants import InvariantViolation, check_backend, check_metadata


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


@dataclass
class FlashAttentionLikeMetadata:
    """FA3/FA4 keep metadata in a dataclass; Triton/FlashInfer in plain objects."""

    cache_seqlens_int32: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor


def triton_like(**fields) -> SimpleNamespace:
    base = dict(kv_indptr=ints(0, 3, 7), kv_indices=torch.zeros(7, dtype=torch.int64),
                qo_indptr=ints(0, 4, 8))
    return SimpleNamespace(**{**base, **fields})


def test_consistent_metadata_passes():
    check_metadata(triton_like(), "eager init_forward_metadata")
    check_metadata(FlashAttentionLikeMetadata(ints(3, 4), ints(0, 1, 2), ints(0, 3, 7)), "eager")


def test_decreasing_indptr_raises():
    with pytest.raises(InvariantViolation, match=re.escape(
            "replay init_forward_metadata_out_graph: kv_indptr decreases at row 1 (5 -> 2): "
            "a negative per-request length")):
        check_metadata(triton_like(kv_indptr=ints(0, 5, 2, 7)), "replay init_forward_metadata_out_graph")


def test_decreasing_cu_seqlens_raises():
    with pytest.raises(InvariantViolation, match=re.escape("cu_seqlens_k decreases at row 0 (0 -> -3)")):
        check_metadata(FlashAttentionLikeMetadata(ints(3, 4), ints(0, 1, 2), ints(0, -3, 4)), "replay")


def test_indptr_not_starting_at_zero_raises():
    with pytest.raises(InvariantViolation, match=re.escape(
            "eager: qo_indptr[0] = 2, an indptr must start at 0")):
        check_metadata(triton_like(qo_indptr=ints(2, 4, 8)), "eager")


def test_negative_length_raises():
    with pytest.raises(InvariantViolation, match=re.escape("replay: cache_seqlens_int32[1] = -3 < 0")):
        check_metadata(FlashAttentionLikeMetadata(ints(3, -3), ints(0, 1, 2), ints(0, 3, 3)), "replay")


def test_indptr_reading_beyond_its_allocated_indices_raises():
    with pytest.raises(InvariantViolation, match=re.escape(
            "eager: kv_indptr[-1] = 42 indices to read, but the buffer behind kv_indices holds 38 "
            "(its allocation)")):
        check_metadata(triton_like(kv_indptr=ints(0, 20, 42), kv_indices=torch.zeros(38)), "eager")


def test_indptr_reading_beyond_a_guarded_buffer_quotes_the_recorded_capacity():
    """A step backend's kv_indices is a slice: what bounds it is the guarded allocation behind it."""
    guards = Guards()
    buffer = guards.guarded("cuda_graph_kv_indices", (3, 20), torch.int64, "cpu")
    with pytest.raises(InvariantViolation, match=re.escape(
            "kv_indptr[-1] = 42 indices to read, but the buffer behind kv_indices holds 40 "
            "(recorded when guarded)")):
        check_metadata(triton_like(kv_indptr=ints(0, 20, 42), kv_indices=buffer[1][:5]), "replay",
                       guards.capacity)
    check_metadata(triton_like(kv_indptr=ints(0, 20, 40), kv_indices=buffer[1][:5]), "replay", guards.capacity)


def test_check_backend_names_the_step_backend():
    steps = [SimpleNamespace(forward_metadata=triton_like()),
             SimpleNamespace(forward_metadata=triton_like(kv_indptr=ints(0, 4, 1)))]
    with pytest.raises(InvariantViolation, match=re.escape("eager, step backend 1: kv_indptr decreases")):
        check_backend(SimpleNamespace(attn_backends=steps), "eager")
