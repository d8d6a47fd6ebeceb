"""Several GPUs of one host: each pytest-xdist worker pinned to one GPU before CUDA starts.

A run over N GPUs has N x k workers (k per GPU), and worker slot s runs on GPU s mod N, so the
slots spread round-robin. A slot is claimed, not derived from the worker's name: xdist names the
workers gw0..gw<n-1> but a replacement for a dead worker gw<n>, gw<n+1>, ..., so "gw<i> takes GPU
i mod N" would pile replacements onto the low GPUs and leave the dead worker's GPU idle. Each
worker instead holds a file lock on its slot for its whole life; the kernel drops the lock when
the process ends, however it ends (a segfault, the os._exit after a sticky CUDA error), so a
replacement takes exactly the slot its predecessor left. The lock files, in the run folder,
name the worker and GPU that hold each slot.

Pinning sets CUDA_VISIBLE_DEVICES, which CUDA reads once, when it initialises: the plugin calls
pin_worker from pytest_configure, before any test module touches torch.cuda.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from harness.base import platform

SLOTS_DIR = "gpu-slots"
CLAIM_WAIT_S = 10.0  # a replacement may start while its predecessor's process is still ending
_HELD: list[IO] = []  # slot locks this process holds until it exits


class GpuChoiceError(ValueError):
    """--gpus asks for GPUs this machine does not have; the message says what it has."""


def choose_gpus(count: int, visible: list[str]) -> list[str]:
    """The first ``count`` of the visible GPU ids, or GpuChoiceError naming what is visible."""
    if count < 1:
        raise GpuChoiceError(f"--gpus {count}: expected at least 1")
    if not visible:
        raise GpuChoiceError(f"--gpus {count}: this machine has no CUDA GPU")
    if count > len(visible):
        raise GpuChoiceError(f"--gpus {count}: only {len(visible)} GPU(s) visible ({','.join(visible)})")
    return visible[:count]


def gpu_of_slot(slot: int, gpus: list[str]) -> str:
    return gpus[slot % len(gpus)]


def claim_slot(folder: Path, slots: int, preferred: int, wait_s: float = CLAIM_WAIT_S) -> tuple[int, IO | None]:
    """Lock the first free slot from ``preferred`` on; the returned handle holds it while open.

    Waits up to ``wait_s`` for one to free (a dying predecessor); if none does, shares
    ``preferred`` unlocked (handle None) rather than refuse to run.
    """
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        for offset in range(slots):
            slot = (preferred + offset) % slots
            handle = open(folder / f"slot-{slot}.lock", "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            return slot, handle
        if time.monotonic() >= deadline:
            return preferred, None
        time.sleep(0.2)


def worker_gpu(worker: str, worker_count: int, gpus: list[str], folder: Path) -> str:
    """The GPU worker ``gw<i>`` runs on, its slot claimed (and held) in ``folder``."""
    slots = max(worker_count, 1)
    slot, handle = claim_slot(folder, slots, int(worker.removeprefix("gw")) % slots)
    gpu = gpu_of_slot(slot, gpus)
    if handle is not None:
        handle.truncate(0)
        handle.write(f"slot {slot}: {worker} (pid {os.getpid()}) on GPU {gpu}\n")
        handle.flush()
        _HELD.append(handle)
    return gpu


def pin_worker(folder: Path) -> str | None:
    """In an xdist worker on a GPU machine: restrict this process to its slot's GPU; the GPU id, else None."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not platform.HAS_GPU or not worker.startswith("gw"):
        return None
    gpus = platform.visible_gpus()
    if not gpus:
        return None
    gpu = worker_gpu(worker, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), gpus, folder)
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu
