"""The batches a CUDA-graph cell replays its one captured graph on, derived from its case.

Production captures a graph once and replays it thousands of times on batches of every size up
to the capture size; state one replay leaves in the static buffers (a row the next batch no
longer fills, an indptr the metadata init does not rewrite) is a bug class a single replay
cannot show. So a graph cell replays its graph on two batches, each compared with the
reference: the cell's own batch, and one extra batch with other lengths, ordered so that a
smaller batch follows a larger one wherever the capture size allows:

- capture size > bs: first an extra batch of bs + 1 requests, then the cell's batch;
- capture size == bs > 1: the cell's batch, then an extra batch of bs - 1 requests;
- capture size == bs == 1: the cell's batch, then an extra batch of 1 request.

Extra request i's prefix is the cell's prefix of request (i + 1) mod bs, shortened by i + 1
tokens (at least 1, at most the cell's longest), so row lengths differ from the cell's batch at
the same rows; its draft trees are drawn with seed + 1. The window and every other field are
the case's. The extra batch is padded to the capture size as the cell pads (small_real: short
genuine requests; otherwise as the runners pad, prod_fill). The same cell always gets the same
batches. The requests of both batches live in one set of pools, so the graph, the backend and
the pools are built once and serve both.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.cases import CaseSpec
from harness.cell_matrix import Cell

SMALL_REAL_PREFIXES = (1, 2, 3)


@dataclass(frozen=True)
class ReplayBatch:
    spec: CaseSpec  # the batch as run: small_real fillers included
    real_bs: int  # the requests compared: the first real_bs of spec
    extra: bool  # False: the cell's own batch

    def label(self, number: int, after: "ReplayBatch | None") -> str:
        """How comparisons name this replay, e.g. 'replay 2 (extra bs 1 after bs 3)'."""
        what = f"{'extra ' if self.extra else ''}bs {self.real_bs}"
        return f"replay {number} ({what}{f' after bs {after.real_bs}' if after else ''})"


def with_small_real_requests(spec: CaseSpec, capture_bs: int) -> CaseSpec:
    """small_real padding: fill the captured batch with short genuine requests."""
    extra = capture_bs - spec.bs
    prefixes = [SMALL_REAL_PREFIXES[i % len(SMALL_REAL_PREFIXES)] for i in range(extra)]
    update = dict(bs=capture_bs, prefix_lens=[*spec.prefix_lens, *prefixes])
    if spec.input_lens is not None:
        update["input_lens"] = [*spec.input_lens, *[spec.input_lens[0]] * extra]
    return spec.model_copy(update=update)


def _padded(spec: CaseSpec, cell: Cell, extra: bool) -> ReplayBatch:
    run = with_small_real_requests(spec, cell.capture_bs) if cell.padding == "small_real" else spec
    return ReplayBatch(run, spec.bs, extra)


def extra_batch_spec(spec: CaseSpec, bs: int) -> CaseSpec:
    """``bs`` requests with other prefix lengths than the case's (see the module docstring)."""
    prefixes, longest = spec.prefix_lens, max(spec.prefix_lens)
    shifted = [min(longest, max(1, prefixes[(i + 1) % spec.bs] - (i + 1))) for i in range(bs)]
    update = dict(bs=bs, prefix_lens=shifted, seed=spec.seed + 1)
    if spec.input_lens is not None:
        update["input_lens"] = [spec.input_lens[0]] * bs
    return spec.model_copy(update=update)


def cell_batch(cell: Cell) -> ReplayBatch:
    """The cell's own batch, padded as the cell pads."""
    return _padded(cell.case.spec, cell, extra=False)


def replay_batches(cell: Cell) -> list[ReplayBatch]:
    """A graph cell's batches in replay order, the cell's own among them."""
    spec, capture_bs = cell.case.spec, cell.capture_bs
    own = cell_batch(cell)
    if capture_bs > spec.bs:
        return [_padded(extra_batch_spec(spec, spec.bs + 1), cell, extra=True), own]
    return [own, _padded(extra_batch_spec(spec, max(spec.bs - 1, 1)), cell, extra=True)]
