"""Several replays per capture: the batches a graph cell replays, and a stale static buffer caught.

Production replays one captured graph on batch after batch; a backend that leaves one of its
static buffers as the previous replay filled it reads the previous batch's metadata. The
positive control makes sglang's Triton backend do exactly that (its out-of-graph metadata init
leaves cuda_graph_kv_indices as the first replay filled it) and the cell must fail on its second
replay, and only there. Runs on CPU with the cg_meta form (on a GPU, the cuda_graph form).
"""

from __future__ import annotations

from harness.base import platform
from harness.probes.controls import matrix_cell
from harness.cell.cell_matrix import replay_batches
from harness.cell.run_cell import run_cell

FORM = "cuda_graph" if platform.HAS_GPU else "cg_meta"
CELL = f"target_verify-tree-bs3-dtypefloat32-triton-{FORM}-cbs3-nopad"  # replays bs 3, then an extra bs 2


def test_batches_follow_the_rule_and_are_the_same_every_time():
    padded = matrix_cell(f"target_verify-tree-bs3-dtypefloat32-triton-{FORM}-cbs6-small_real")
    first, second = replay_batches(padded)
    assert (first.extra, first.real_bs, first.spec.bs, first.spec.prefix_lens[:4]) == (True, 4, 6, [1, 38, 6, 1])
    assert (second.extra, second.real_bs, second.spec.prefix_lens[:3]) == (False, 3, [9, 1, 40])
    assert second.label(2, first) == "replay 2 (bs 3 after bs 4)"
    full = matrix_cell(CELL)
    own, extra = replay_batches(full)
    assert (own.extra, extra.extra, extra.spec.bs, extra.spec.prefix_lens) == (False, True, 2, [1, 38])
    assert replay_batches(full) == replay_batches(matrix_cell(CELL))


def test_a_buffer_left_stale_between_replays_fails_the_later_replay(monkeypatch):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    cell = matrix_cell(CELL)
    clean = run_cell(cell)
    assert clean.ok, clean.describe()

    original = TritonAttnBackend.init_forward_metadata_out_graph
    replays = []

    def leaves_kv_indices_stale(self, forward_batch, in_capture: bool = False):
        kept = self.cuda_graph_kv_indices.clone()
        original(self, forward_batch, in_capture=in_capture)
        if not in_capture:
            replays.append(forward_batch.batch_size)
            if len(replays) > 1:
                self.cuda_graph_kv_indices.copy_(kept)

    monkeypatch.setattr(TritonAttnBackend, "init_forward_metadata_out_graph", leaves_kv_indices_stale)
    stale = run_cell(cell)
    failed = [name for name, comparison in stale.comparisons.items() if not comparison.ok]
    assert len(replays) == 2
    assert failed, f"{CELL}: a kv_indices buffer left stale by replay 1 went unnoticed: {stale.describe()}"
    assert all(name.startswith("replay 2 (extra bs 2 after bs 3) vs reference") for name in failed), failed
