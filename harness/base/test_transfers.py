"""Host data moved to the device in one copy, device figures read back in one (harness/base/transfers.py),
and a reference that never reads its own device back: on one shared GPU each such read is a wait."""

from __future__ import annotations

import pytest
import torch

from harness.checks.reference import Query, census_parts, reference_attention
from harness.base.transfers import to_device_together, to_host_together

pytestmark = pytest.mark.release_independent


def test_host_tensors_reach_the_device_whole_and_in_their_own_shapes():
    index, one, empty = torch.arange(6).view(2, 3), torch.tensor([7]), torch.zeros(0, 2, dtype=torch.int64)
    moved = to_device_together("meta", index, one, empty)
    assert [tensor.shape for tensor in moved] == [index.shape, one.shape, empty.shape]
    assert all(tensor.device.type == "meta" for tensor in moved)
    assert [tensor.tolist() for tensor in to_device_together("cpu", index, one, empty)] == [
        index.tolist(), [7], []]


def test_int_vectors_come_back_as_int64_in_the_order_given():
    found = to_host_together([torch.tensor([1, -2], dtype=torch.int32), torch.tensor([3]),
                              torch.tensor([4, 5, 6], dtype=torch.int16)])
    assert [tensor.tolist() for tensor in found] == [[1, -2], [3], [4, 5, 6]]
    assert {tensor.dtype for tensor in found} == {torch.int64}


def test_the_reference_and_the_census_read_nothing_back_from_their_device():
    """On the meta device a tensor holds no values, so a mask index or a .item() there raises: the
    reference's and census's index data come from the host, their results stay on the device."""
    rows = [torch.randn(7, 2, 8, device="meta"), torch.randn(3, 2, 8, device="meta")]
    queries = [Query(0, ((0, 5),)), Query(1, ((0, 2),)), Query(0, ((2, 4), (5, 7))), Query(1, ((0, 3),))]
    out = reference_attention(torch.randn(4, 4, 8, device="meta"), queries, rows, rows, 0.3)
    assert out.shape == (4, 4, 8) and out.device.type == "meta"
    parts = census_parts(queries, [4, 2], rows, rows, kv_head=1, page_size=2)
    assert {split: tuple(part.shape) for split, part in parts.items()} == {
        "any": (4, 8), "prefix|new": (4, 8), "page|rest": (4, 8)}
