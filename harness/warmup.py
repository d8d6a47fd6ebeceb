"""One warm-up pass before the cells start: each kernel configuration of the selection compiled once.

Backends compile their kernels on first use (Triton's JIT, FlashInfer's JIT, sglang's CuTe-DSL
FA4) and keep them in per-machine disk caches (harness/kernel_caches.py). Left to the cells, every
worker compiles the same kernels at the same moment on a cold cache, and each cell that meets a
new configuration carries its compile in its own time. So before the workers start, the
controller runs one cell per distinct kernel configuration of the selection, several at once,
each in a process of its own (a crash there is the cell's to report later, not the warm-up's).
Its outcome is thrown away: it only fills the caches. The run then records the pass as its own
phase (run.json ``warm_up``), and no cell pays a first-call compile for a configuration the pass
met. On a machine without a GPU, Triton's interpreter compiles nothing, so there is no pass.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from harness.case_strategy import DrawnCase
from harness.cell_matrix import Cell, skip_reason
from harness.runners import RUNNER_FORMS

# The case fields compiled kernels specialise on (constexpr sizes, dtypes, paging), beside the
# backend, the mode and the runner form. Lengths and batch sizes are run-time arguments.
KERNEL_FIELDS = ("dtype", "head_dim", "num_heads", "num_kv_heads", "page_size")
WARM_UP_TIMEOUT_S = 600


def kernel_configuration(cell: Cell) -> tuple:
    """What decides which kernels a cell compiles: backend, mode, graph or eager, tree or chain,
    draft window or none, and the KERNEL_FIELDS."""
    spec = cell.case.spec
    return (cell.backend, cell.case.mode, RUNNER_FORMS[cell.runner].graph, spec.topk > 1, spec.draft_window > 0,
            *(getattr(spec, name) for name in KERNEL_FIELDS))


def representatives(cells: list[Cell]) -> list[Cell]:
    """The first runnable cell of each kernel configuration, in matrix order."""
    first: dict[tuple, Cell] = {}
    for cell in cells:
        if skip_reason(cell) is None:
            first.setdefault(kernel_configuration(cell), cell)
    return list(first.values())


def as_drawn(cell: Cell) -> DrawnCase:
    """The cell as a one-cell case the worker process (harness/cell_worker.py) runs."""
    fields = cell.case.spec.model_dump()
    fields.update(backends=[cell.backend], runners=[cell.runner])
    if cell.capture_bs is not None:
        fields["capture_bs"] = [cell.capture_bs]
    if cell.padding is not None:
        fields["pad_styles"] = [cell.padding]
    return DrawnCase(cell.case.mode, fields)


@dataclass(frozen=True)
class WarmUp:
    configurations: int
    processes: int
    seconds: float

    def as_report(self) -> dict:
        return dict(configurations=self.configurations, processes=self.processes, seconds=round(self.seconds, 1))

    def line(self) -> str:
        return (f"attn-harness warm-up: {self.configurations} kernel configurations compiled in "
                f"{self.seconds:.1f} s by {self.processes} processes, before the cells")


def warm_up(cells: list[Cell], processes: int, replay: str | None) -> WarmUp:
    """Run one cell per kernel configuration, ``processes`` at a time; their outcomes are dropped."""
    from harness.shrink import CellExecutor

    chosen = representatives(cells)
    started = time.perf_counter()
    processes = max(1, min(processes, len(chosen)))

    def run_share(share: list[Cell]) -> None:
        executor = CellExecutor(replay, timeout_s=WARM_UP_TIMEOUT_S)
        try:
            for cell in share:
                executor.run(as_drawn(cell))
        finally:
            executor.close()

    with ThreadPoolExecutor(processes) as pool:
        list(pool.map(run_share, [chosen[i::processes] for i in range(processes)]))
    return WarmUp(len(chosen), processes if chosen else 0, time.perf_counter() - started)
