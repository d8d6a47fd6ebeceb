"""What nvidia-smi says of the visible GPUs, read without a CUDA context (harness/platform.py)."""

from __future__ import annotations

import subprocess

import pytest

from harness import platform

LISTING = "0, GPU-aaa, NVIDIA H200, 580.159.04\n1, GPU-bbb, NVIDIA H100 80GB HBM3, 580.159.04\n"


@pytest.mark.parametrize("visible, expected", [
    (None, ("NVIDIA H200", "580.159.04")),  # all visible: device 0 is the first listed
    ("1", ("NVIDIA H100 80GB HBM3", "580.159.04")),
    ("GPU-bbb,GPU-aaa", ("NVIDIA H100 80GB HBM3", "580.159.04")),
    ("7", None),  # a MIG slice or an id nvidia-smi does not list: the caller asks CUDA
])
def test_first_visible_gpu_follows_cuda_visible_devices(monkeypatch, visible, expected):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=LISTING))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert platform._first_visible_gpu() == expected


def test_no_nvidia_smi_means_no_answer(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(subprocess, "run", missing)
    assert platform._first_visible_gpu() is None


def test_gpu_memory_of_the_visible_gpus(monkeypatch):
    listing = "143771\n81559\n"  # MiB, as nvidia-smi lists memory.total without units
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=listing))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0,5")
    assert platform.gpu_memory_gib() == [79, 140]
