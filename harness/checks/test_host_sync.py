"""The host-sync guard fires: on a GPU, a planted ``.item()`` in a copy of Triton's metadata init
(eager, and the graph's replay-time init) fails a real cell naming the planted line, while one
planted at capture time, outside the per-step promise, does not; a backend sglang keeps host lengths
for is not held to the promise. Without a GPU, the recorder is driven by torch's warning as sync
debug mode emits it, from code standing in for a backend.

Run: pytest harness/checks/test_host_sync.py -v
"""

from __future__ import annotations

import warnings

import pytest
import torch

from harness.base import platform
from harness.checks import host_sync
from harness.checks.host_sync import HostSyncViolation, SyncLog

on_gpu = pytest.mark.skipif(not platform.HAS_GPU, reason="a host sync needs a CUDA device to wait on")

PLANTED = "forward_batch.seq_lens.max().item()  # planted host sync"
PLANTED_CODE = r"forward_batch\.seq_lens\.max\(\)\.item\(\)"
EAGER_CELL = "target_verify-chain-bs2-dtypefloat32-triton-eager"
GRAPH_CELL = "target_verify-chain-bs2-dtypefloat32-triton-cuda_graph-cbs2-nopad"


def _backend_code(filename: str):
    """A function compiled as if from ``filename`` that warns as torch's sync debug mode does."""
    source = ("import warnings\n"
              "def init_forward_metadata():\n"
              "    warnings.warn('called a synchronizing CUDA operation')\n")
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["init_forward_metadata"]


@pytest.fixture
def debug_modes(monkeypatch) -> list:
    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    return modes


def test_a_sync_becomes_a_finding_naming_its_call_site(debug_modes):
    log = SyncLog(armed=True)
    sync = _backend_code("<patched TritonAttnBackend.init_forward_metadata>")
    with log.guard("eager init_forward_metadata"):
        sync()
        sync()  # the same site twice is one site
    assert debug_modes == ["warn", 0]  # armed to warn (the hook runs to its end), then restored
    with pytest.raises(HostSyncViolation, match=r"needs_cpu_seq_lens = False\), 1 site\(s\): eager "
                       r"init_forward_metadata: <patched TritonAttnBackend.init_forward_metadata>:3 in "
                       r"init_forward_metadata$"):
        log.check()


def test_other_warnings_and_unarmed_logs_pass_through(debug_modes):
    log = SyncLog(armed=True)
    with pytest.warns(DeprecationWarning):
        with log.guard("eager"):
            warnings.warn("something else", DeprecationWarning)
    log.check()
    unarmed = SyncLog(armed=False)
    with unarmed.guard("eager"):
        _backend_code("/x/sglang/srt/layers/attention/x.py")()  # warns, unrecorded
    unarmed.check()
    assert debug_modes == ["warn", 0]  # the unarmed log never touched the mode


def test_a_torch_compile_compiling_is_not_a_step(debug_modes):
    log = SyncLog(armed=True)
    with log.guard("eager"):
        _backend_code(str(host_sync._TORCH / "_dynamo" / "convert_frame.py"))()
    log.check()


def test_call_site_names_an_sglang_file_from_its_package(debug_modes):
    log = SyncLog(armed=True)
    with log.guard("eager"):
        _backend_code("/venv/lib/site-packages/sglang/srt/layers/attention/x.py")()
    assert log.sites == [("eager", "sglang/srt/layers/attention/x.py:3 in init_forward_metadata")]


def _plant(function: str, anchor: str, text: str) -> None:
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    from harness.bugs.seed_bugs import patch_source

    patch_source(TritonAttnBackend, function, [(anchor, f"{anchor}\n{text}")])


@pytest.fixture
def restore_triton(monkeypatch):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    for name in ("init_forward_metadata", "init_forward_metadata_out_graph"):
        monkeypatch.setattr(TritonAttnBackend, name, getattr(TritonAttnBackend, name))


def _run(cell_id: str):
    from harness.cell.run_cell import run_cell
    from harness.probes.controls import matrix_cell

    return run_cell(matrix_cell(cell_id))


@on_gpu
def test_planted_sync_in_eager_metadata_init_fails_the_cell(restore_triton):
    _plant("init_forward_metadata", "bs = forward_batch.batch_size", PLANTED)
    with pytest.raises(HostSyncViolation, match=r"eager init_forward_metadata: <patched TritonAttnBackend."
                                                r"init_forward_metadata>:\d+ in init_forward_metadata: " + PLANTED_CODE):
        _run(EAGER_CELL)


@on_gpu
def test_planted_sync_at_graph_replay_fails_the_cell(restore_triton):
    _plant("init_forward_metadata_out_graph", "in_capture: bool = False, ):", "if not in_capture:\n    " + PLANTED)
    with pytest.raises(HostSyncViolation, match=r"replay 1 \(bs 2\) init_forward_metadata_out_graph: <patched "
                                                r"TritonAttnBackend.init_forward_metadata_out_graph>:\d+ in "
                                                r"init_forward_metadata_out_graph: " + PLANTED_CODE):
        _run(GRAPH_CELL)


@on_gpu
def test_a_sync_at_capture_alone_is_outside_the_promise(restore_triton):
    _plant("init_forward_metadata_out_graph", "in_capture: bool = False, ):", "if in_capture:\n    " + PLANTED)
    assert _run(GRAPH_CELL).ok


@on_gpu
@pytest.mark.parametrize("backend, promised", [("triton", True), ("fa3", True), ("flashinfer", False)])
def test_the_guard_is_armed_where_sglang_drops_host_lengths(backend, promised):
    from harness.base.results import PhaseClock
    from harness.cell.run_cell import CellSkipped, prepared_cell
    from harness.probes.controls import matrix_cell

    cell = matrix_cell(f"target_verify-chain-bs2-dtypebfloat16-{backend}-eager")
    try:
        with prepared_cell(cell, PhaseClock()) as prepared:
            assert prepared.sync_log.armed is promised
    except CellSkipped as reason:
        pytest.skip(str(reason))
