"""DFlash's compact draft cache as the harness models it: the prefixes a compact row keeps whole are
exactly those sglang's own compact-length function leaves unchanged, and the host bound the cells
hand the backend is sglang's (the block left out; the reservation bounded on the GPU-only path)."""

from __future__ import annotations

import pytest
import torch

from harness.base.case_spec import CaseSpec
from harness.modes import MODES
from harness.modes.dflash_draft import compact_keeps_whole
from harness.modes.dflash_verify import RESERVED_LEN


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("window", [4, 8, 17])
def test_rows_kept_whole_match_sglang(window, page_size):
    from types import SimpleNamespace

    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    worker = SimpleNamespace(draft_window_size=window, page_size=page_size, device="cpu")
    lens = torch.arange(0, window + 3 * page_size + 3)
    kept = DFlashWorkerV2._compute_compact_draft_seq_lens(worker, lens)
    whole = [int(n) for n, k in zip(lens, kept) if int(k) == int(n)]
    assert whole == list(range(compact_keeps_whole(window, page_size) + 1))


def _spec(**fields) -> CaseSpec:
    base = dict(name="c", prefix_lens=[1, 8, 5], input_lens=[4, 4, 4], draft_window=8, runners=["eager"],
                backends=["triton"])
    return CaseSpec(**{**base, **fields})


def test_host_bound_leaves_the_block_out():
    assert MODES["dflash_draft"].host_lens(_spec()) == [1, 8, 5]  # the non-compact mirror would be [5, 12, 9]
    assert MODES["dflash_draft"].host_lens(_spec(draft_window=0)) == [5, 12, 9]


def test_gpu_only_bound_over_estimates_the_kept_rows():
    # the reservation (prefix + 2 x block) bounded by the window: every row 8, over [1, 8, 5]
    assert MODES["dflash_draft"].host_lens(_spec(host_mirrors="gpu_only")) == [8, 8, 8]
    paged = _spec(host_mirrors="gpu_only", page_size=16, prefix_lens=[1, 23, 5])
    reserved = [RESERVED_LEN.value(prefix, 4, 16) for prefix in paged.prefix_lens]  # page-aligned from 0.5.19
    assert MODES["dflash_draft"].host_lens(paged) == [min(n, 8 + 16) for n in reserved]
