"""Positive controls for the CUDA-graph capacity check: an undersized kv_indices buffer fails at
init_cuda_graph_state, before any kernel runs (so the figures it quotes are the allocation's)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from harness.cell.run_cell import run_cell
from harness.probes.controls import matrix_cell
from harness.checks.invariants import InvariantViolation, check_graph_capacity


def indices(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.int64)


def test_single_step_buffer_holding_the_largest_batch_passes():
    check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=indices(4 * 128)), 4, 1, 128, False)


def test_undersized_single_step_buffer_fails():
    with pytest.raises(InvariantViolation, match=re.escape(
            "init_cuda_graph_state: cuda_graph_kv_indices holds 511 indices, but 4 captured requests x "
            "1 branches x context 128 need 512")):
        check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=indices(511)), 4, 1, 128, False)


def test_undersized_buffer_in_a_per_wrapper_list_fails():
    """FlashInfer keeps one buffer per wrapper; each must hold the largest batch."""
    buffers = [indices(4 * 128), indices(4 * 64)]
    with pytest.raises(InvariantViolation, match=re.escape("cuda_graph_kv_indices holds 256 indices")):
        check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=buffers), 4, 1, 128, False)


def test_multi_step_row_with_the_topk_factor_passes():
    check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=indices(3, 8 * 4 * 128)), 8, 4, 128, True)


def test_multi_step_row_without_the_topk_factor_fails():
    """sglang #27338: a row sized max_bs x context, without the topk branches."""
    with pytest.raises(InvariantViolation, match=re.escape(
            "init_cuda_graph_state: cuda_graph_kv_indices row holds 1024 indices, but 8 captured "
            "requests x 4 branches x context 128 need 4096")):
        check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=indices(3, 8 * 128)), 8, 4, 128, True)


def test_real_triton_draft_backend_sized_without_topk_fails_the_cell(monkeypatch):
    """The real TritonMultiStepDraftBackend with #27338's sizing, through a cg_meta cell."""
    from sglang.srt.layers.attention import triton_backend

    monkeypatch.setattr(triton_backend, "draft_kv_indices_buffer_width",
                        lambda num_seqs, topk, max_context_len: num_seqs * max_context_len)
    control = matrix_cell("draft_decode-topk4-long-bs4-dtypefloat32-triton-cg_meta-cbs8-prod_fill")
    with pytest.raises(InvariantViolation, match=re.escape(
            "cuda_graph_kv_indices row holds 32768 indices, but 8 captured requests x 4 branches x "
            "context 4096 need 131072")):
        run_cell(control)


def test_a_block_table_is_checked_in_pages_per_request():
    """FlashMLA's graph kv_indices: a row per captured request, a column per 64-token page."""
    check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=indices(4, 65)), 4, 1, 4096, False, table_page=64)
    with pytest.raises(InvariantViolation, match="need \\(4, 64\\) pages of 64"):
        check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=indices(4, 63)), 4, 1, 4096, False, table_page=64)
    with pytest.raises(InvariantViolation, match="block table"):
        check_graph_capacity(SimpleNamespace(cuda_graph_kv_indices=indices(3, 65)), 4, 1, 4096, False, table_page=64)
