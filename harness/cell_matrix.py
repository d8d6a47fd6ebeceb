"""The cell matrix: every (case, backend, runner form, padding) a run covers, with readable ids."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from harness.backends import BACKENDS
from harness.cases import Case
from harness.runners import GRAPH_RUNNER_NAMES, RUNNER_FORMS


@dataclass(frozen=True)
class Cell:
    case: Case
    backend: str
    runner: str
    capture_bs: int | None = None  # graph forms only
    padding: str | None = None  # prod_fill | small_real; None when nothing is padded

    @property
    def cell_id(self) -> str:
        graph = f"-cbs{self.capture_bs}-{self.padding or 'nopad'}" if self.runner in GRAPH_RUNNER_NAMES else ""
        return f"{self.case.case_id}-{self.backend}-{self.runner}{graph}"

    @property
    def variant(self) -> str:
        spec = self.case.spec
        shape = "tree" if spec.topk > 1 else "chain"
        return shape if spec.host_mirrors == "full" else f"{shape}+{spec.host_mirrors}"

    def record_keys(self) -> dict:
        """The fields reports group by (see harness/reporting)."""
        return dict(cell_id=self.cell_id, case=self.case.spec.name, backend=self.backend,
                    mode=self.case.mode, variant=self.variant, runner=self.runner,
                    padding=self.padding, capture_bs=self.capture_bs)


def skip_reason(cell: Cell) -> str | None:
    """Why this machine cannot run the cell, known from data alone, or None.

    The runner form's rules (graph support, which machine a form needs) and the backend entry's
    (platform, installed kernels, dtypes, draft window, declared limits) need nothing built, so
    collection attaches the reason as a skip mark and such a cell costs nothing when the run
    reaches it. What only a built backend can answer (sglang's host-mirror decision) stays in
    run_cell.
    """
    entry = BACKENDS[cell.backend]
    return RUNNER_FORMS[cell.runner].skip_reason(entry) or entry.skip_reason(cell.case.mode, cell.case.spec)


def _graph_cells(case: Case, backend: str, runner: str) -> list[Cell]:
    spec = case.spec
    cells = []
    for capture_bs in spec.capture_sizes:
        styles = spec.pad_styles if capture_bs > spec.bs else [None]
        cells += [Cell(case, backend, runner, capture_bs, style) for style in styles]
    return cells


def expand_cells(cases: list[Case]) -> list[Cell]:
    cells = []
    for case in cases:
        for backend in case.spec.backends:
            for runner in case.spec.runners:
                cells += (_graph_cells(case, backend, runner) if runner in GRAPH_RUNNER_NAMES
                          else [Cell(case, backend, runner)])
    return cells


def in_shard(cell: Cell, shard: tuple[int, int]) -> bool:
    """--shard i/n keeps the cells whose id hashes to i-1 (mod n).

    A stable hash of the id, not the position: the cell list is ordered by
    case and backend, so round-robin would send whole backends to one shard,
    and adding a case would reshuffle every shard.
    """
    number, total = shard
    return zlib.crc32(cell.cell_id.encode()) % total == number - 1
