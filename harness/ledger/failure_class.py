"""How a cell failed: the one registry of failure classes, and what "fails the same way" means.

Two readers. A KNOWN_FAILURES.md entry names a class in its signature (harness/ledger/known_failures.py),
so a known bug that starts failing another way is reported as new instead of hiding behind its
entry; the record of every failing cell carries its class, which the reports group by. The
shrinker keeps a smaller case only when it fails in the same class with the same detail: the
exception type and its message with every number masked; for the harness's own detectors
(metadata invariants, canaries) only the rule that fired, not where it fired, so a graph-replay
failure may shrink to the same rule firing eagerly; for a mismatch, which comparisons failed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.checks.compare import CellResult

# class -> what it means, in the words KNOWN_FAILURES.md and the reports use.
FAILURE_CLASSES = {
    "census-only": "only the key-census head differs from the reference; every scored head passes",
    "numeric": "scored heads differ from the reference (finite errors)",
    "nan": "NaN in the output where the reference has a number",
    "invariant": "a metadata invariant or the graph-buffer capacity check fired (InvariantViolation)",
    "canary": "memory behind a guarded buffer changed: an out-of-bounds write (CanaryTripped)",
    "host-sync": "a per-step metadata hook sglang runs without host lengths waited on the GPU (HostSyncViolation)",
    "error": "another exception, raised by sglang or the harness while the cell ran",
    "crash": "the process died, or its device context is poisoned (illegal memory access, device-side assert)",
}
MEASURED = ("census-only", "numeric")  # classes whose failures have a size: max_abs_err
GPU_ONLY = ("host-sync",)  # classes whose detector runs on a GPU alone (a CPU has no device to wait on)
AFTER_NUMBERS = ("host-sync",)  # classes a cell fails with only once its numbers have passed
# Exceptions of the harness's detectors, whose message reads "<where>: <rule>"; the rule is the detail.
DETECTORS = {"InvariantViolation": "invariant", "CanaryTripped": "canary", "HostSyncViolation": "host-sync"}
# What a poisoned device context says: the process must not run another cell.
CRASH_MARKERS = ("illegal memory access", "CUDA error", "device-side assert", "unspecified launch failure")
TIMED_OUT = "timed out"  # a shrink candidate that stalled its worker: no class of the ledger


@dataclass(frozen=True)
class Failure:
    failure_class: str  # a key of FAILURE_CLASSES
    detail: str  # what else a smaller case must reproduce (see the module docstring)
    message: str  # what the cell said, first line
    max_abs_err: float | None = None  # MEASURED classes: the record's max_abs_err (see of_mismatch)

    def __str__(self) -> str:
        return f"{self.failure_class}: {self.detail}"


def _masked(text: str) -> str:
    return re.sub(r"\d+", "#", text.splitlines()[0] if text else "")[:200]


def of_exception(error: BaseException) -> Failure:
    name, message = type(error).__name__, str(error)
    first = f"{name}: {message}".splitlines()[0][:500]
    if name in DETECTORS:
        return Failure(DETECTORS[name], _masked(message.partition(": ")[2]), first)
    kind = "crash" if any(marker in message for marker in CRASH_MARKERS) else "error"
    return Failure(kind, f"{name}: {_masked(message)}", first)


def of_mismatch(result: CellResult) -> Failure:
    """A cell whose comparisons failed: NaN first, then scored heads, else the key census alone.

    Its size is the max_abs_err the cell's record, results.json and SUMMARY.md show (that of its
    worst comparison, CellResult.worst), so a KNOWN_FAILURES.md range copied from a report holds
    the cells it was measured on.
    """
    failing = [(name, c) for name, c in result.comparisons.items() if not c.ok]
    kinds = ", ".join(sorted({name.rpartition(" step ")[0] for name, _ in failing}))
    kind = ("nan" if any(c.nan_count for _, c in failing) else
            "numeric" if any(c.scored_mismatch_frac for _, c in failing) else "census-only")
    size = result.worst.max_abs_err
    return Failure(kind, kinds, result.describe()[:500], size if math.isfinite(size) else None)


def of_dead_process(message: str) -> Failure:
    """A worker that died running the cell (a segfault): nothing but the controller's word."""
    return Failure("crash", "the process died", message)


CRASHED = str(of_dead_process(""))  # a shrink candidate that killed its worker
