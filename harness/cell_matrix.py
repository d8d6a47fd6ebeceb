"""The cell matrix: every (case, backend, runner form, padding) a run covers, with readable ids and
the one-line command that reruns each."""

from __future__ import annotations

import shlex
import zlib
from dataclasses import dataclass
from pathlib import Path

from harness import ROOT
from harness.backends import BACKENDS
from harness.cases import CASES_DIR, Case
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


def _repo_path(value: str) -> str:
    """A path as a command run from the repository root needs it: relative inside the repo, else absolute."""
    path = Path(value).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# Options of the first run that change what a cell is, so a rerun must repeat them:
# option -> (its default, how to write a value for a command run from the repository root).
CELL_DEFINING_OPTIONS = {"--cases-dir": (_repo_path(str(CASES_DIR)), _repo_path), "--replay": (None, str),
                         # a generated cell exists only when drawn again (harness/generated_plugin.py)
                         "--generated": ("0", str), "--generated-seed": ("0", str),
                         "--generated-profile": (None, str)}


def cell_defining_args(getoption) -> list[str]:
    """The first run's options that a rerun of one of its cells needs (non-default ones only)."""
    args = []
    for option, (default, spell) in CELL_DEFINING_OPTIONS.items():
        value = getoption(option)
        if value is not None and spell(value) != default:
            args += [option, spell(value)]
    return args


def rerun_command(nodeid: str, args: list[str]) -> str:
    """The one-line command a user runs to reproduce one cell."""
    return shlex.join(["pytest", nodeid, *args])
