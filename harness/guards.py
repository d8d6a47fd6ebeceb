"""Canary zones: guard space behind buffers a backend writes, checked after each forward.

A backend that writes past the end of an index or output buffer overwrites
memory some other tensor owns, usually silently. We give the backend a view of
a slightly larger allocation whose tail holds a known pattern; any change to
that tail is reported with the buffer's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

GUARD_ELEMENTS = 4096
INT_PATTERN = 0x5EADBEEF
FLOAT_PATTERN = -12345.0


class CanaryTripped(AssertionError):
    """Memory behind a buffer changed: an out-of-bounds write."""


@dataclass
class Guards:
    zones: list[tuple[str, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def guarded(self, name: str, shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
        """A tensor of ``shape`` whose storage is followed by a canary zone."""
        count = 1
        for dim in shape:
            count *= dim
        pattern = FLOAT_PATTERN if dtype.is_floating_point else INT_PATTERN
        storage = torch.full((count + GUARD_ELEMENTS,), pattern, dtype=dtype, device=device)
        self.zones.append((name, storage[count:], storage[count:].clone()))
        return storage[:count].view(shape)

    def replace(self, owner, attribute: str, name: str):
        """Swap ``owner.attribute`` (a tensor, or a list of them) for guarded copies."""
        old = getattr(owner, attribute, None)
        if isinstance(old, list):
            new = [self._guarded_copy(t, f"{name}[{i}]") for i, t in enumerate(old)]
        elif isinstance(old, torch.Tensor):
            new = self._guarded_copy(old, name)
        else:
            return None
        setattr(owner, attribute, new)
        return new

    def _guarded_copy(self, old: torch.Tensor, name: str) -> torch.Tensor:
        new = self.guarded(name, tuple(old.shape), old.dtype, old.device)
        new.copy_(old)
        return new

    def check(self, where: str) -> None:
        for name, zone, expected in self.zones:
            changed = zone != expected
            if bool(changed.any()):
                first = int(torch.nonzero(changed)[0])
                raise CanaryTripped(
                    f"{where}: out-of-bounds write past {name}: {int(changed.sum())} guard elements "
                    f"changed, the first {first} elements past its end")


def guard_graph_indices(guards: Guards, backend) -> None:
    """Guard the CUDA-graph kv_indices buffers (re-pointing step backends at their rows).

    A multi-step draft backend owns one 2-D buffer whose rows it handed to its
    step backends at init; those keep the row in the container type they use
    (Triton: the tensor, FlashInfer: a one-element list).
    """
    buffer = guards.replace(backend, "cuda_graph_kv_indices", "cuda_graph_kv_indices")
    for step, inner in enumerate(getattr(backend, "attn_backends", [])):
        if isinstance(buffer, torch.Tensor) and buffer.dim() == 2:
            row = buffer[step]
            inner.cuda_graph_kv_indices = [row] if isinstance(inner.cuda_graph_kv_indices, list) else row
        else:
            guards.replace(inner, "cuda_graph_kv_indices", f"step {step} cuda_graph_kv_indices")
