"""Blackwell's MLA backends skip with sglang's own refusal on a Hopper GPU, and a backend a release
no longer has says so on that release."""

from __future__ import annotations

from harness.base import platform, releases
from harness.families import BACKENDS
from harness.probes.controls import matrix_cell

CELL = "target_verify-mla-chain-page64-dtypebfloat16-{}-eager"


def _refusal_on(monkeypatch, backend: str, capability: tuple[int, int]) -> str | None:
    monkeypatch.setattr(platform, "HAS_GPU", True)
    monkeypatch.setattr(platform, "compute_capability", lambda: capability)
    cell = matrix_cell(CELL.format(backend))
    return BACKENDS[backend].skip_reason(cell.case.mode, cell.case.spec)


def test_trtllm_mla_on_hopper_quotes_sglang(monkeypatch):
    reason = _refusal_on(monkeypatch, "trtllm_mla", (9, 0))
    assert reason.startswith("trtllm_mla needs compute capability >= (10, 0): 'TRTLLM MLA backend is only "
                             "supported on Blackwell GPUs (SM100/SM12x)")


def test_trtllm_mla_is_not_refused_on_blackwell(monkeypatch):
    reason = _refusal_on(monkeypatch, "trtllm_mla", (10, 0))
    assert reason is None or "compute capability" not in reason


def test_cutlass_mla_is_absent_from_0_5_20_on(monkeypatch):
    reason = _refusal_on(monkeypatch, "cutlass_mla", (10, 0))
    removed = releases.version_key(releases.installed().contracts) >= releases.version_key("0.5.20")
    assert (reason or "").startswith("cutlass_mla: sglang 0.5.20 removed") == removed
    if not removed:  # 0.5.17-0.5.19: no EAGLE draft backend, on any machine
        cell = matrix_cell(CELL.format("cutlass_mla"))
        assert "EAGLE is not supported in decode attention backend cutlass_mla" in BACKENDS["cutlass_mla"].refusal(
            cell.case.mode, cell.case.spec)
