"""What nvidia-smi says of the visible GPUs, read without a CUDA context (harness/base/platform.py)."""

from __future__ import annotations

import subprocess

import pytest

from harness.base import platform

LISTING = "0, GPU-aaa, NVIDIA H200, 580.159.04\n1, GPU-bbb, NVIDIA H100 80GB HBM3, 580.159.04\n"


@pytest.mark.parametrize("visible, expected", [
    (None, ["NVIDIA H200", "580.159.04"]),  # all visible: device 0 is the first listed
    ("1", ["NVIDIA H100 80GB HBM3", "580.159.04"]),
    ("GPU-bbb,GPU-aaa", ["NVIDIA H100 80GB HBM3", "580.159.04"]),
    ("7", None),  # a MIG slice or an id nvidia-smi does not list: the caller asks CUDA
])
def test_first_visible_gpu_follows_cuda_visible_devices(monkeypatch, visible, expected):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=LISTING))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert platform._first_visible_gpu("name", "driver_version") == expected


def test_no_nvidia_smi_means_no_answer(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(subprocess, "run", missing)
    assert platform._first_visible_gpu("name") is None


@pytest.mark.parametrize("listing, expected", [
    ("0, GPU-aaa, 9.0\n1, GPU-bbb, 10.0\n", (10, 0)),  # CUDA_VISIBLE_DEVICES=1: the second GPU's
    ("0, GPU-aaa, [N/A]\n1, GPU-bbb, [N/A]\n", (8, 6)),  # an nvidia-smi that cannot say: CUDA's answer
])
def test_compute_capability_from_nvidia_smi_without_cuda(monkeypatch, listing, expected):
    """The draws' processes, forked after the controller's CUDA started, ask it: a CUDA call there raises."""
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=listing))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 6))
    platform.compute_capability.cache_clear()
    try:
        assert platform.compute_capability() == expected
    finally:
        platform.compute_capability.cache_clear()


def test_gpu_memory_of_the_visible_gpus(monkeypatch):
    listing = "143771\n81559\n"  # MiB, as nvidia-smi lists memory.total without units
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=listing))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0,5")
    assert platform.gpu_memory_gib() == [79, 140]
