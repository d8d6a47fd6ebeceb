"""Positive controls for canary zones: a write one element past a guarded buffer is reported.

The writes go through ``as_strided`` views that reach past the buffer's end, as
a kernel indexing the allocation would; nothing here runs a Triton kernel.
"""

from __future__ import annotations

import re

import pytest
import torch

from harness.probes.controls import write_past_end
from harness.checks.graph_buffers import guard_graph_buffers, reachable_memory
from harness.checks.guards import CanaryTripped, Guards


def test_write_past_int_buffer_trips_canary():
    guards = Guards()
    kv_indices = guards.guarded("cuda_graph_kv_indices", (38,), torch.int64, "cpu")
    write_past_end(kv_indices, 7)
    with pytest.raises(CanaryTripped, match=re.escape(
            "after replay: out-of-bounds write past cuda_graph_kv_indices: element 38 changed, but it "
            "holds 38 int64 elements (recorded when guarded); 1 element(s) of its canary zone changed")):
        guards.check("after replay")


def test_write_past_float_buffer_trips_canary():
    guards = Guards()
    output = guards.guarded("step 0 attention output", (4, 8), torch.float32, "cpu")
    write_past_end(output, 0.5, past=2)
    with pytest.raises(CanaryTripped, match=re.escape(
            "past step 0 attention output: element 34 changed, but it holds 32 float32 elements")):
        guards.check("after replay")


def test_write_past_bool_mask_trips_canary():
    """One-byte elements (masks) are guarded byte for byte."""
    guards = Guards()
    mask = guards.guarded("_verify_mask.buffer", (10,), torch.bool, "cpu")
    write_past_end(mask, True)
    with pytest.raises(CanaryTripped, match=re.escape("element 10 changed, but it holds 10 bool")):
        guards.check("after capture")


def test_writes_inside_the_buffer_leave_the_canary_alone():
    guards = Guards()
    buffer = guards.guarded("cuda_graph_kv_indices", (38,), torch.int64, "cpu")
    buffer.fill_(-1)
    buffer[-1] = 2**62
    guards.check("after replay")


class ListHolder:
    """FlashInfer's shape of graph state: one kv_indices buffer per wrapper, in a list."""

    def __init__(self):
        self.cuda_graph_kv_indices = None

    def init_cuda_graph_state(self):
        self.cuda_graph_kv_indices = [torch.zeros(16, dtype=torch.int32) for _ in range(2)]


def test_write_past_list_held_buffer_trips_canary_with_its_list_position():
    holder = ListHolder()
    before = reachable_memory(holder)
    holder.init_cuda_graph_state()
    guards = Guards()
    guard_graph_buffers(guards, holder, before)
    write_past_end(holder.cuda_graph_kv_indices[1], 5)
    with pytest.raises(CanaryTripped, match=re.escape(
            "past cuda_graph_kv_indices[1]: element 16 changed, but it holds 16 int32 elements")):
        guards.check("after replay")


def test_capacity_is_the_recorded_allocation_from_a_views_start():
    guards = Guards()
    buffer = guards.guarded("cuda_graph_kv_indices", (3, 100), torch.int64, "cpu")
    assert guards.capacity(buffer) == 300
    assert guards.capacity(buffer[1]) == 200  # a row reaches the rows after it
    assert guards.capacity(buffer[2, 40:]) == 60
    assert guards.capacity(torch.zeros(300, dtype=torch.int64)) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU beside the host to hold zones on two devices")
def test_zones_on_the_host_and_the_gpu_are_checked_together():
    """FlashInfer MLA keeps some graph buffers on the host: a trip on either device is found, in order."""
    guards = Guards()
    host = guards.guarded("host indptr", (8,), torch.int32, "cpu")
    device = guards.guarded("device indptr", (8,), torch.int32, "cuda")
    guards.check("untouched")
    write_past_end(host, 7)
    with pytest.raises(CanaryTripped, match="host indptr"):
        guards.check("host trip")
    del device
