"""Canary zones: guard space behind buffers a backend writes, checked after each forward.

A backend that writes past the end of an index or output buffer overwrites
memory some other tensor owns, usually silently. We give the backend a buffer
carved out of a larger allocation whose tail holds a known byte pattern; any
change to that tail is reported with the buffer's name.

Each guarded allocation's capacity is recorded when it is made, before any
kernel can touch it, and every message quotes that record: a figure read from
a tensor after an out-of-bounds write may come from corrupted host memory (the
Triton CPU interpreter writes raw memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

GUARD_BYTES = 16384
CANARY_BYTE = 0xA5  # as int32 0xA5A5A5A5, as fp32 -2.9e-16: no kernel writes it by chance


class CanaryTripped(AssertionError):
    """Memory behind a buffer changed: an out-of-bounds write."""


@dataclass(frozen=True)
class GuardedAllocation:
    name: str
    dtype: torch.dtype
    capacity: int  # elements of dtype, recorded when the allocation was made
    start: int  # data pointer of element 0
    zone: torch.Tensor  # uint8 view of the canary bytes

    @property
    def end(self) -> int:
        return self.start + self.capacity * self.dtype.itemsize


@dataclass
class Guards:
    allocations: list[GuardedAllocation] = field(default_factory=list)

    def allocate(self, name: str, numel: int, dtype: torch.dtype, device) -> torch.Tensor:
        """A flat tensor of ``numel`` elements followed by a canary zone."""
        nbytes = numel * dtype.itemsize
        raw = torch.full((nbytes + GUARD_BYTES,), CANARY_BYTE, dtype=torch.uint8, device=device)
        flat = raw[:nbytes].view(dtype)
        self.allocations.append(GuardedAllocation(name, dtype, numel, raw.data_ptr(), raw[nbytes:]))
        return flat

    def guarded(self, name: str, shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
        """A tensor of ``shape`` whose storage is followed by a canary zone."""
        count = 1
        for dim in shape:
            count *= dim
        return self.allocate(name, count, dtype, device).view(shape)

    def capacity(self, view: torch.Tensor) -> int | None:
        """Elements of ``view``'s dtype from its first element to the end of its guarded
        allocation, as recorded when guarded; None if the view lies in no guarded allocation.

        sglang hands kernels slices of preallocated buffers; what bounds a kernel is
        the allocation behind the slice, not the slice.
        """
        pointer = view.data_ptr()
        for allocation in self.allocations:
            if allocation.start <= pointer < allocation.end or pointer == allocation.start:
                return (allocation.end - pointer) // view.element_size()
        return None

    def check(self, where: str) -> None:
        if not self.allocations:
            return
        touched = _zones_touched([allocation.zone for allocation in self.allocations])
        for allocation in (allocation for allocation, hit in zip(self.allocations, touched) if hit):
            changed = torch.nonzero(allocation.zone != CANARY_BYTE).flatten()
            if changed.numel():
                size = allocation.dtype.itemsize
                elements = torch.unique(changed // size)
                first = allocation.capacity + int(elements[0])
                raise CanaryTripped(
                    f"{where}: out-of-bounds write past {allocation.name}: element {first} changed, "
                    f"but it holds {allocation.capacity} {str(allocation.dtype).removeprefix('torch.')} "
                    f"elements (recorded when guarded); {elements.numel()} element(s) of its canary "
                    "zone changed")


def _zones_touched(zones: list[torch.Tensor]) -> list[bool]:
    """Whether each canary zone changed, in one copy to the host per device: a nonzero per zone would
    wait on the GPU each time. A backend may keep graph buffers on the host too (FlashInfer MLA's
    fast-plan indptrs), so the zones are stacked per device."""
    found: dict[int, bool] = {}
    by_device: dict[torch.device, list[int]] = {}
    for index, zone in enumerate(zones):
        by_device.setdefault(zone.device, []).append(index)
    for indices in by_device.values():
        flags = torch.stack([(zones[i] != CANARY_BYTE).any() for i in indices]).tolist()
        found.update(zip(indices, flags))
    return [found[index] for index in range(len(zones))]

