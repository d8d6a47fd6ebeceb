"""One warm-up pass before the cells start: each kernel configuration of the selection compiled once.

Backends compile their kernels on first use (Triton's JIT, FlashInfer's JIT, sglang's CuTe-DSL
FA4) and keep them in per-machine disk caches (harness/base/kernel_caches.py). Left to the cells, every
worker compiles the same kernels at the same moment on a cold cache, and each cell that meets a
new configuration carries its compile in its own time. So the controller runs one cell per
distinct kernel configuration of the selection, several at once, each in a process of its own (a
crash there is the cell's to report later, not the warm-up's), while the workers start and import
sglang; a worker's first cell of a shared configuration waits until the pass is done (a cell whose
configuration is its own compiles it itself and need not wait). Outcomes are thrown away: the pass
only fills the caches. Configurations compiled into a kept cache (the ledger beside the caches)
are not run again, so a warm run, or a run on a machine given a carried cache, has nothing to
warm. The pass is recorded as its own phase (run.json ``warm_up``). Without a GPU, Triton's
interpreter compiles nothing, so there is no pass.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.base import kernel_caches, platform
from harness.search.case_strategy import DrawnCase
from harness.case.cases import fields_of
from harness.cell.cell_matrix import Cell, skip_reason
from harness.runners import RUNNER_FORMS

# The case fields compiled kernels specialise on (constexpr sizes, dtypes, paging, the model's window:
# Triton's extend kernel takes SLIDING_WINDOW_SIZE as a constexpr), beside the backend, the mode and
# the runner form. Lengths and batch sizes are run-time arguments.
KERNEL_FIELDS = ("dtype", "head_dim", "num_heads", "num_kv_heads", "page_size", "sliding_window")
WARM_UP_TIMEOUT_S = 600
# In the run folder: written by the controller when the pass starts and when it ends. Cells are
# scheduled only after the controller's collection hooks return, so a worker's first cell always
# sees the first file if there is a pass.
STARTED_FILE, DONE_FILE = "warm-up-started", "warm-up-done"
WAIT_POLL_S = 0.2
WAIT_LIMIT_S = 1800  # a controller that died mid-pass must not hold its workers for ever


def kernel_configuration(cell: Cell) -> tuple:
    """What decides which kernels a cell compiles: backend, mode, graph or eager, tree or chain,
    draft window or none, and the KERNEL_FIELDS."""
    spec = cell.case.spec
    return (cell.backend, cell.case.mode, RUNNER_FORMS[cell.runner].graph, spec.topk > 1, spec.draft_window > 0,
            *(getattr(spec, name) for name in KERNEL_FIELDS))


def _ledger_key(configuration: tuple) -> str:
    """A configuration on this stack and GPU: a new release or another GPU compiles anew."""
    stack = {name: version for name, version in platform.versions().items() if name != "numpy"}
    return json.dumps([platform.device_description()["device"], stack, list(configuration)])


def _ledger() -> Path:
    return kernel_caches.folders()[0] / "attn-harness-warmed.json"


def _compiled() -> set[str]:
    try:
        return set(json.loads(_ledger().read_text()))
    except (OSError, ValueError):
        return set()


def _by_configuration(cells: list[Cell]) -> tuple[dict[tuple, Cell], dict[tuple, int]]:
    """Each kernel configuration of the runnable cells: its first cell in matrix order, and how many meet it."""
    first: dict[tuple, Cell] = {}
    count: dict[tuple, int] = {}
    for cell in cells:
        if skip_reason(cell) is None:
            configuration = kernel_configuration(cell)
            first.setdefault(configuration, cell)
            count[configuration] = count.get(configuration, 0) + 1
    return first, count


def representatives(cells: list[Cell]) -> tuple[list[Cell], int]:
    """The first runnable cell of each kernel configuration that two or more cells share, in matrix
    order, and how many configurations one cell alone meets.

    Warming a configuration means running one of its cells; for a configuration of one cell that
    runs the cell twice, compile included, while no other worker would compile it alongside. So that
    cell compiles its kernels itself (a generated tier at production shapes is mostly such cells)."""
    first, count = _by_configuration(cells)
    shared = [cell for configuration, cell in first.items() if count[configuration] > 1]
    return shared, len(first) - len(shared)


def compiling_alone(cells: list[Cell]) -> set[str]:
    """The ids of the runnable cells whose kernel configuration no other cell of ``cells`` meets.

    The warm-up pass leaves them to compile their kernels in their own time (representatives), so on
    a fresh machine they are a run's longest cells (a FlashInfer window kernel: about 150 s). They
    need nothing from the pass, so they start at once and first (harness/session/pytest_plugin.py), rather
    than wait for it and then hold a worker at the end of the run while the others sit idle."""
    first, count = _by_configuration(cells)
    return {cell.cell_id for configuration, cell in first.items() if count[configuration] == 1}


def as_drawn(cell: Cell) -> DrawnCase:
    """The cell as a one-cell case the worker process (harness/search/cell_worker.py) runs."""
    fields = fields_of(cell.case.spec)
    fields.update(backends=[cell.backend], runners=[cell.runner])
    if cell.capture_bs is not None:
        fields["capture_bs"] = [cell.capture_bs]
    if cell.padding is not None:
        fields["pad_styles"] = [cell.padding]
    return DrawnCase(cell.case.mode, fields)


@dataclass
class WarmUp:
    """The pass as the controller runs it: started in a thread, waited on by the cells."""

    configurations: int  # distinct kernel configurations of the selection that several cells share
    to_compile: list[Cell]  # the representatives of those not in the ledger
    processes: int
    run_folder: Path
    single: int = 0  # configurations one cell alone meets: compiled in that cell
    seconds: float | None = None
    ended_at: float | None = None  # epoch seconds: the benchmark cuts the wall time there

    def as_report(self) -> dict:
        return dict(configurations=self.configurations, compiled=len(self.to_compile), single=self.single,
                    processes=self.processes,
                    seconds=None if self.seconds is None else round(self.seconds, 1), ended_at=self.ended_at)

    def line(self) -> str:
        return (f"attn-harness warm-up: {len(self.to_compile)} of {self.configurations} kernel configurations "
                f"compiled in {self.seconds or 0:.1f} s by {self.processes} processes, alongside the workers' start "
                f"(the rest were in the kept cache; {self.single} more, met by one cell each, compile in that cell)")

    def _run_share(self, share: list[Cell], patches: list[str]) -> list[Cell]:
        from harness.search.shrink import CellExecutor

        executor, done = CellExecutor(patches, timeout_s=WARM_UP_TIMEOUT_S), []
        try:
            for cell in share:
                if executor.run(as_drawn(cell))["status"] in ("passed", "failed", "skipped"):
                    done.append(cell)  # a crash or a timeout may have left its kernels uncompiled
        finally:
            executor.close()
        return done

    def _run(self, patches: list[str]) -> None:
        started = time.perf_counter()
        try:
            shares = [self.to_compile[i::self.processes] for i in range(self.processes)]
            with ThreadPoolExecutor(max(1, self.processes)) as pool:
                done = [cell for found in pool.map(lambda share: self._run_share(share, patches), shares)
                        for cell in found]
            if done:
                ledger = _ledger()
                ledger.parent.mkdir(parents=True, exist_ok=True)
                known = _compiled() | {_ledger_key(kernel_configuration(cell)) for cell in done}
                ledger.write_text(json.dumps(sorted(known), indent=0) + "\n")
        finally:
            self.seconds, self.ended_at = time.perf_counter() - started, time.time()
            (self.run_folder / DONE_FILE).write_text(f"{self.seconds:.1f}\n")

    def start(self, patches: list[str]) -> threading.Thread:
        """Compile in the background, with the run's patch options (cell_matrix.patch_args) applied."""
        (self.run_folder / STARTED_FILE).write_text(f"{len(self.to_compile)} configurations\n")
        thread = threading.Thread(target=self._run, args=(patches,), daemon=True)
        thread.start()
        return thread


def plan_warm_up(cells: list[Cell], processes: int, run_folder: Path) -> WarmUp:
    """The configurations of ``cells`` and which of them the kept cache does not hold yet."""
    chosen, single = representatives(cells)
    compiled = _compiled()
    to_compile = [cell for cell in chosen if _ledger_key(kernel_configuration(cell)) not in compiled]
    return WarmUp(len(chosen), to_compile, max(1, min(processes, len(to_compile))), run_folder, single)


def wait_for_warm_up(run_folder: Path) -> None:
    """A process's first cell: wait while the controller's pass runs, if there is one."""
    if not (run_folder / STARTED_FILE).exists():
        return
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not (run_folder / DONE_FILE).exists() and time.monotonic() < deadline:
        time.sleep(WAIT_POLL_S)
