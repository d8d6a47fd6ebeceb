"""Worker -> GPU pinning for runs over several GPUs (harness/speed/gpu_slots.py), checked on any machine.

The locks are real (fcntl in this process and in a child that dies); only the GPU list is given.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from harness.speed import gpu_slots
from harness.base import platform
from harness.ledger.lone_run import ROOT


@pytest.fixture
def held(monkeypatch):
    """Slot locks taken by this test, released when it ends."""
    handles: list = []
    monkeypatch.setattr(gpu_slots, "_HELD", handles)
    yield handles
    for handle in handles:
        handle.close()


def test_choose_gpus_takes_the_first_n_and_names_what_is_visible():
    assert gpu_slots.choose_gpus(2, ["3", "5", "7"]) == ["3", "5"]
    with pytest.raises(gpu_slots.GpuChoiceError, match=r"--gpus 3: only 2 GPU\(s\) visible \(0,1\)"):
        gpu_slots.choose_gpus(3, ["0", "1"])
    with pytest.raises(gpu_slots.GpuChoiceError, match="--gpus 1: this machine has no CUDA GPU"):
        gpu_slots.choose_gpus(1, [])


@pytest.mark.parametrize("gpus,workers,expected", [
    (["0", "1"], 2, ["0", "1"]),  # one worker per GPU
    (["0", "1"], 4, ["0", "1", "0", "1"]),  # two per GPU, round-robin
    (["4", "6"], 2, ["4", "6"]),  # the ids the run was given, not 0..n-1
    (["0"], 3, ["0", "0", "0"]),
])
def test_workers_spread_round_robin_over_the_gpus(tmp_path, held, gpus, workers, expected):
    found = [gpu_slots.worker_gpu(f"gw{i}", workers, gpus, tmp_path) for i in range(workers)]
    assert found == expected
    assert len(held) == workers  # every worker holds its own slot


def _child_holding_slot(folder, worker: str) -> subprocess.Popen:
    """A process that claims a slot as ``worker`` of a 2-worker run on GPUs 0,1 and stays alive."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from harness.speed import gpu_slots
        print(gpu_slots.worker_gpu({worker!r}, 2, ["0", "1"], Path({str(folder)!r})), flush=True)
        time.sleep(600)
    """)
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)


def test_a_replacement_worker_takes_the_gpu_its_dead_predecessor_left(tmp_path, held):
    """xdist names gw1's replacement gw2; i mod 2 would put it on GPU 0 beside gw0."""
    assert gpu_slots.worker_gpu("gw0", 2, ["0", "1"], tmp_path) == "0"
    child = _child_holding_slot(tmp_path, "gw1")
    try:
        assert child.stdout.readline().strip() == "1"
        # While gw1 lives, every slot is held: a third process shares its preferred slot, unlocked.
        assert gpu_slots.claim_slot(tmp_path, 2, preferred=0, wait_s=0)[1] is None
    finally:
        os.kill(child.pid, signal.SIGKILL)  # dies as a crashed worker does, without cleaning up
        child.wait()
    assert gpu_slots.worker_gpu("gw2", 2, ["0", "1"], tmp_path) == "1"
    assert "gw2" in (tmp_path / "slot-1.lock").read_text()  # the slot file names who holds it


def test_pin_worker_sets_cuda_visible_devices_for_its_slot(tmp_path, held, monkeypatch):
    monkeypatch.setattr(platform, "HAS_GPU", True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert gpu_slots.pin_worker(tmp_path) == "3"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"


def test_pin_worker_leaves_the_controller_and_cpu_machines_alone(tmp_path, held, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setattr(platform, "HAS_GPU", False)
    assert gpu_slots.pin_worker(tmp_path) is None
    monkeypatch.setattr(platform, "HAS_GPU", True)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")  # the controller, or a run without xdist
    assert gpu_slots.pin_worker(tmp_path) is None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_run_asking_for_more_gpus_than_visible_is_one_line():
    done = subprocess.run([sys.executable, "-m", "harness", "run", "--gpus", "99"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("python -m harness: error: --gpus 99: ")
    assert len(done.stderr.splitlines()) == 1
