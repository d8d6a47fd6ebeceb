"""Where the harness runs: device, Triton interpreter switch, installed versions.

This module must be imported before torch/triton/sglang kernels anywhere in the
harness: Triton reads ``TRITON_INTERPRET`` once, at import time, so the switch to
its CPU interpreter has to happen first (``harness/__init__.py`` imports us).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import warnings

def _has_cuda_driver() -> bool:
    """Decide GPU vs CPU without importing torch (which would freeze Triton's mode)."""
    if os.environ.get("ATTN_HARNESS_FORCE_CPU") == "1":
        return False
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


HAS_GPU = _has_cuda_driver()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # sglang says at import, on any machine without a GPU, that its AWQ and GGUF quantization need one:
    # nothing a user of the harness can act on (no cell quantizes).
    warnings.filterwarnings("ignore", message=r"Only CUDA.* support (AWQ|GGUF)", category=UserWarning)

DEVICE = "cuda" if HAS_GPU else "cpu"


def visible_gpus() -> list[str]:
    """GPU ids this process may use, without initialising CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return visible.split(",")
    import subprocess

    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return [str(i) for i, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def gpu_count() -> int:
    return max(len(visible_gpus()), 1)


# A worker's share of a GPU's memory: a generated cell's pools are capped at 4 GiB
# (harness/search/draw_caps.py), plus the float64 reference's chunks (256 MiB), the CUDA context and the
# backends' workspaces (FlashInfer's 512 MiB).
GPU_GIB_PER_WORKER = 8


def _query_gpus(*fields: str) -> list[list[str]]:
    """The fields asked for, one row per GPU nvidia-smi lists (no CUDA context in this process)."""
    import subprocess

    listing = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    return [[field.strip() for field in line.split(",")] for line in listing.splitlines()
            if line.count(",") == len(fields) - 1]


def gpu_memory_gib() -> list[int]:
    """Memory of each visible GPU, from nvidia-smi (no CUDA context in this process)."""
    memory = [int(total) // 1024 for (total,) in _query_gpus("memory.total")]
    return [memory[int(gpu)] for gpu in visible_gpus() if gpu.isdigit() and int(gpu) < len(memory)]


def default_workers() -> int:
    """pytest-xdist workers for a run here: on a GPU host as many as its cores and its GPUs' memory
    allow (GPU_GIB_PER_WORKER each), several cells at once on each GPU (measured: reports/gpu/BENCH.md);
    else one per core."""
    cores = os.cpu_count() or 1
    if not HAS_GPU:
        return cores
    by_memory = sum(gib // GPU_GIB_PER_WORKER for gib in gpu_memory_gib()) or gpu_count()
    return max(1, min(cores, by_memory))


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def versions() -> dict[str, str | None]:
    """Versions recorded with every run, so a result can be traced to its stack (read once per
    process: the warm-up ledger keys every configuration with them)."""
    import platform as _platform

    names = {
        "torch": "torch",
        "triton": "triton",
        "sglang": "sglang",
        "flashinfer": "flashinfer-python",
        "sgl_kernel": "sglang-kernel",
        "flash_attn_4": "flash-attn-4",
        "numpy": "numpy",
    }
    found = {key: installed_version(dist) for key, dist in names.items()}
    found["python"] = _platform.python_version()
    return found


def _first_visible_gpu(*fields: str) -> list[str] | None:
    """nvidia-smi's ``fields`` of the GPU torch would call device 0: no CUDA context in this process
    (the controller never needs one), None where nvidia-smi cannot say."""
    import subprocess

    try:
        gpus = _query_gpus("index", "uuid", *fields)
    except (OSError, subprocess.SubprocessError):
        return None
    first = visible_gpus()[0] if os.environ.get("CUDA_VISIBLE_DEVICES") else next((index for index, *_ in gpus), None)
    return next((found for index, uuid, *found in gpus if first in (index, uuid)), None)


@functools.cache
def device_description() -> dict[str, str | None]:
    if not HAS_GPU:
        return {"device": "cpu (TRITON_INTERPRET=1)", "driver": None}
    found = _first_visible_gpu("name", "driver_version")
    if found is None:  # MIG slices, or no nvidia-smi: ask CUDA
        import torch

        return {"device": torch.cuda.get_device_name(), "driver": None}
    return {"device": found[0], "driver": found[1]}


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors of the GPU torch calls device 0 (0 without a GPU): backends size buffers
    by it (Triton's MLA decode splits)."""
    if not HAS_GPU:
        return 0
    import torch

    return torch.cuda.get_device_properties(0).multi_processor_count


@functools.cache
def compute_capability() -> tuple[int, int]:
    """(major, minor) of the GPU torch calls device 0, read once per process from nvidia-smi where
    it can say: the generated tier draws in processes forked from the controller, whose CUDA has
    started (importing sglang starts it), and CUDA cannot start again in a fork."""
    found = _first_visible_gpu("compute_cap")
    if found is None or found[0].count(".") != 1:  # MIG slices, no nvidia-smi, or one too old to say
        import torch

        return tuple(torch.cuda.get_device_capability())
    major, minor = found[0].split(".")
    return int(major), int(minor)
