"""Host data for the GPU in one copy, and device figures for the host in one copy.

Each copy between pageable host memory and a GPU makes the host wait for the GPU's queue, and so
does a boolean-mask index (``nonzero`` sends the count back). On one GPU shared by many pytest
workers those waits, not the kernels, are what a cell's time goes to (reports/gpu/NOTES.md,
2026-11-26: a warm FA3 cell made about 110 of them for under 2 ms of kernels). The harness builds
index data on the host and moves a phase's worth of it at once.
"""

from __future__ import annotations

import torch


def to_device_together(device, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """``tensors`` (int64, on the host) on ``device``, in one copy, each in its own shape."""
    if not tensors:
        return []
    flat = torch.cat([tensor.reshape(-1) for tensor in tensors]).to(device)
    return [part.view(tensor.shape) for part, tensor in zip(flat.split([t.numel() for t in tensors]), tensors)]


def to_host_together(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """int ``tensors`` as int64 on the host, one copy per device they are on (flattened)."""
    on = {}
    for index, tensor in enumerate(tensors):
        on.setdefault(tensor.device, []).append(index)
    found: list[torch.Tensor | None] = [None] * len(tensors)
    for indices in on.values():
        flat = torch.cat([tensors[i].detach().reshape(-1).to(torch.int64) for i in indices]).cpu()
        for i, part in zip(indices, flat.split([tensors[i].numel() for i in indices])):
            found[i] = part
    return found
