"""On a GPU: every backend guards exactly the graph buffers its entry declares, and an overrun
of an FA3/FA4 graph buffer trips that buffer's canary. Skipped without a GPU.

Run: pytest harness/checks/test_graph_guards_gpu.py -v
"""

from __future__ import annotations

import re

import pytest

from harness.base import platform
from harness.families import BACKENDS
from harness.cell.run_cell import run_cell
from harness.probes.controls import guarded_graph_state, matrix_cell, overrun_after_metadata_init
from harness.checks.graph_buffers import buffer_name
from harness.checks.guards import CanaryTripped

pytestmark = pytest.mark.skipif(not platform.HAS_GPU, reason="needs a CUDA GPU (FA3/FA4/FlashInfer graph state)")

GRAPH_BACKENDS = ("triton", "flashinfer", "fa3", "fa4")
ROLE_CELLS = (  # every role, topk 1 and 2
    "target_verify-chain-bs2-dtypebfloat16-{}-cuda_graph-cbs2-nopad",
    "target_verify-tree-bs3-dtypebfloat16-{}-cuda_graph-cbs3-nopad",
    "draft_extend_v2-window4-bs2-dtypebfloat16-{}-cuda_graph-cbs2-nopad",
    "draft_extend_v2-tree-window-bs3-dtypebfloat16-{}-cuda_graph-cbs3-nopad",
    "draft_decode-chain-bs2-dtypebfloat16-{}-cuda_graph-cbs2-nopad",
    "draft_decode-topk2-bs3-dtypebfloat16-{}-cuda_graph-cbs3-nopad",
    "draft_decode-window-sink-dtypebfloat16-{}-cuda_graph-cbs3-nopad",  # sglang 0.5.21+
)


def skip_reason(backend: str, cell_id: str) -> str | None:
    control = matrix_cell(cell_id)
    return BACKENDS[backend].skip_reason(control.case.mode, control.case.spec)


@pytest.mark.parametrize("backend", GRAPH_BACKENDS)
def test_guarded_buffers_are_exactly_the_declared_ones(backend, monkeypatch):
    """Union over roles, topk and the draft window: every declared buffer found, nothing else."""
    found = set()
    for cell_id in (template.format(backend) for template in ROLE_CELLS):
        if skip_reason(backend, cell_id) is None:
            named = guarded_graph_state(cell_id, monkeypatch).named
            found |= {buffer_name(path) for paths in named.values() for path in paths}
    print(f"{backend} guards: {', '.join(sorted(found))}")
    assert found == set(BACKENDS[backend].graph_buffers.value)


FA_BUFFERS = {  # buffer -> the cell whose graph uses it
    "target_verify_metadata['cache_seqlens']": "target_verify-chain-bs2-dtypebfloat16-{}-cuda_graph-cbs2-nopad",
    "target_verify_metadata_topk_expand['page_table']":
        "target_verify-tree-bs3-dtypebfloat16-{}-cuda_graph-cbs3-nopad",
    "draft_extend_metadata['cu_seqlens_k']": "draft_extend_v2-window4-bs2-dtypebfloat16-{}-cuda_graph-cbs2-nopad",
}


@pytest.mark.parametrize("backend", ("fa3", "fa4"))
@pytest.mark.parametrize("buffer", sorted(FA_BUFFERS))
def test_fa_graph_buffer_overrun_trips_its_canary(backend, buffer, monkeypatch):
    """A device write one element past the buffer, right after the backend fills it at capture."""
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    cell_id = FA_BUFFERS[buffer].format(backend)
    if skip_reason(backend, cell_id):
        pytest.skip(skip_reason(backend, cell_id))
    table, key = re.fullmatch(r"(\w+)\['(\w+)'\]", buffer).groups()
    overrun_after_metadata_init(monkeypatch, FlashAttentionBackend,
                                lambda fa: getattr(fa, table)[key])
    with pytest.raises(CanaryTripped, match=re.escape(f"after capture: out-of-bounds write past {buffer}: element ")
                       + r"(\d+) changed, but it holds \1 int32 elements \(recorded when guarded\)"):
        run_cell(matrix_cell(cell_id))
