"""The host-sync guard fires: on a GPU, a planted ``.item()`` in a copy of Triton's metadata init
(eager, and the graph's replay-time init) fails a real cell naming the planted line; a backend
sglang keeps host lengths for is not held to the promise. Without a GPU, the translation of torch's
error into a finding that names the call site is checked on its own.

Run: pytest harness/checks/test_host_sync.py -v
"""

from __future__ import annotations

import pytest
import torch

from harness.base import platform
from harness.checks import host_sync
from harness.checks.host_sync import HostSyncViolation, sync_free

on_gpu = pytest.mark.skipif(not platform.HAS_GPU, reason="a host sync needs a CUDA device to wait on")

PLANTED = "forward_batch.seq_lens.max().item()  # planted host sync"
EAGER_CELL = "target_verify-chain-bs2-dtypefloat32-triton-eager"
GRAPH_CELL = "target_verify-chain-bs2-dtypefloat32-triton-cuda_graph-cbs2-nopad"


def _syncing_call():
    """Stands in for backend code: raises as torch does in sync debug mode "error", from a file of
    its own, so the reported site must be this one."""
    source = "def init_forward_metadata():\n    raise RuntimeError('called a synchronizing CUDA operation')\n"
    namespace: dict = {}
    exec(compile(source, "<patched TritonAttnBackend.init_forward_metadata>", "exec"), namespace)
    return namespace["init_forward_metadata"]


def test_a_sync_becomes_a_finding_naming_its_call_site(monkeypatch):
    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    with pytest.raises(HostSyncViolation, match=r"^eager init_forward_metadata: host sync .*needs_cpu_seq_lens = "
                       r"False\): <patched TritonAttnBackend.init_forward_metadata>:2 in init_forward_metadata"):
        with sync_free(True, "eager init_forward_metadata"):
            _syncing_call()()
    assert modes == ["error", 0]  # armed, then restored


def test_an_unarmed_guard_and_other_errors_pass_through(monkeypatch):
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: pytest.fail("armed while unarmed"))
    with pytest.raises(RuntimeError, match="synchronizing"):
        with sync_free(False, "eager"):
            _syncing_call()()
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    with pytest.raises(ValueError):
        with sync_free(True, "eager"):
            raise ValueError("not a sync")


def test_call_site_names_an_sglang_file_from_its_package():
    try:
        exec(compile("raise RuntimeError('x')", "/venv/lib/site-packages/sglang/srt/layers/attention/x.py", "exec"))
    except RuntimeError as error:
        assert host_sync.call_site(error).startswith("sglang/srt/layers/attention/x.py:1 in <module>")


def _plant(function: str, anchor: str, text: str) -> None:
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    from harness.bugs.seed_bugs import patch_source

    patch_source(TritonAttnBackend, function, [(anchor, f"{anchor}\n{text}")])


@pytest.fixture
def restore_triton(monkeypatch):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    for name in ("init_forward_metadata", "init_forward_metadata_out_graph"):
        monkeypatch.setattr(TritonAttnBackend, name, getattr(TritonAttnBackend, name))


@on_gpu
def test_planted_sync_in_eager_metadata_init_fails_the_cell(restore_triton):
    from harness.cell.run_cell import run_cell
    from harness.probes.controls import matrix_cell

    _plant("init_forward_metadata", "bs = forward_batch.batch_size", PLANTED)
    with pytest.raises(HostSyncViolation, match=r"^eager init_forward_metadata: .*<patched TritonAttnBackend."
                                                r"init_forward_metadata>:\d+ in init_forward_metadata: "
                                                + PLANTED.split("  #")[0].replace("(", r"\(").replace(")", r"\)")):
        run_cell(matrix_cell(EAGER_CELL))


@on_gpu
def test_planted_sync_at_graph_replay_fails_the_cell(restore_triton):
    from harness.cell.run_cell import run_cell
    from harness.probes.controls import matrix_cell

    _plant("init_forward_metadata_out_graph", "in_capture: bool = False, ):",
           "if not in_capture:\n    " + PLANTED)
    with pytest.raises(HostSyncViolation, match=r"^replay 1 \(bs 2\) init_forward_metadata_out_graph: .*<patched "
                                                r"TritonAttnBackend.init_forward_metadata_out_graph>"):
        run_cell(matrix_cell(GRAPH_CELL))


@on_gpu
@pytest.mark.parametrize("backend, promised", [("triton", True), ("fa3", True), ("flashinfer", False)])
def test_the_guard_is_armed_where_sglang_drops_host_lengths(backend, promised):
    from harness.base.results import PhaseClock
    from harness.cell.run_cell import CellSkipped, prepared_cell
    from harness.probes.controls import matrix_cell

    cell = matrix_cell(f"target_verify-chain-bs2-dtypebfloat16-{backend}-eager")
    try:
        with prepared_cell(cell, PhaseClock()) as prepared:
            assert prepared.sync_free is promised
    except CellSkipped as reason:
        pytest.skip(str(reason))
