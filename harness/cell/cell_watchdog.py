"""A watchdog per cell: a cell that runs past --cell-timeout ends its worker, leaving the worker's stacks.

One hanging cell (a kernel that never returns; the Triton interpreter spinning in a heap that a
write past a buffer corrupted) would otherwise hold its worker, and the whole run, until CI's own
limit. faulthandler's watchdog is a C thread that needs no GIL, so it fires whatever the hang
holds: it writes every thread's stack into the cell's hang file and exits the worker. xdist reports
the worker as crashed on that cell and starts another; the controller finds the hang file and
records the cell as crashed with "no result after S s" and the file's path, not a bare dead process.

Armed in xdist workers only: without one, exiting would end the session itself, and nothing would
account for the other cells. A lone re-run of a timed-out cell (--confirm-crashes) is bounded by
--lone-timeout instead.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
from pathlib import Path
from typing import Iterator

from harness.ledger.failure_class import Failure
from harness.base.results import run_dir

DEFAULT_CELL_TIMEOUT_S = 600.0  # the longest cell seen: 269 s (GPU, production shapes, compiles included)
HANG_FOLDER = "hangs"  # in the run folder: one file per cell that timed out
FIRED = "Timeout ("  # faulthandler's first line when the watchdog fires


def hang_file(cell_id: str) -> Path:
    return run_dir() / HANG_FOLDER / f"{cell_id}.txt"


@contextlib.contextmanager
def watched(cell_id: str, timeout_s: float) -> Iterator[None]:
    """Run the body with the watchdog armed; the cell's hang file exists only while it runs (or after it hung)."""
    if timeout_s <= 0 or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    path = hang_file(cell_id)
    path.parent.mkdir(exist_ok=True)
    with open(path, "w") as handle:
        handle.write(f"{cell_id}: no result after {timeout_s:g} s (--cell-timeout); the worker's stacks then:\n")
        handle.flush()
        faulthandler.dump_traceback_later(timeout_s, exit=True, file=handle)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    path.unlink()


def timed_out(cell_id: str) -> Failure | None:
    """The failure of a cell whose worker the watchdog ended; None if it did not (a segfault, say)."""
    path = hang_file(cell_id)
    try:
        text = path.read_text()
    except OSError:
        return None
    if FIRED not in text:
        return None
    return Failure("crash", "the cell timed out", f"{text.splitlines()[0]} ({path})")
