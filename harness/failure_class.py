"""What "fails the same way" means when a failing cell is shrunk.

A failure's class is what a smaller case must reproduce for the shrinker to
accept it: the exception type and its message with every number masked; for
the harness's own detectors (metadata invariants, canaries) only the rule
that fired, not where it fired, so a graph-replay failure may shrink to the
same rule firing eagerly; for a numeric mismatch, which comparisons failed
and whether NaN (read poison) was among them.
"""

from __future__ import annotations

import re

from harness.run_cell import CellResult

# Detectors whose message reads "<where>: <rule>"; the rule is the class.
DETECTORS = ("InvariantViolation", "CanaryTripped")
CRASHED = "crashed (the process died)"
TIMED_OUT = "timed out"


def _masked(text: str) -> str:
    return re.sub(r"\d+", "#", text.splitlines()[0] if text else "")[:200]


def exception_class(error: BaseException) -> str:
    name, message = type(error).__name__, str(error)
    if name in DETECTORS:
        message = message.partition(": ")[2]
    return f"{name}: {_masked(message)}"


def mismatch_class(result: CellResult) -> str:
    failing = [(name, c) for name, c in result.comparisons.items() if not c.ok]
    kinds = sorted({name.rpartition(" step ")[0] for name, _ in failing})
    nan = " with NaN" if any(c.nan_count for _, c in failing) else ""
    return f"mismatch{nan}: {', '.join(kinds)}"
