"""Where a cell's time goes: wall seconds per phase, recorded with the cell's result.

A cell's phases, in the order it runs them. ``imports`` is what sglang costs the first cell a
worker runs (later cells find the modules loaded); the others are paid by every cell. What the
phases leave out of the cell's pytest wall time is pytest's own per-cell work.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

PHASES = (
    "imports",  # sglang's modules, once per worker process
    "layout_pools",  # KV layout, ReqToTokenPool / MHATokenToKVPool filled and poisoned, server args
    "backend",  # model-runner stand-in and sglang's backend object
    "inputs_reference",  # the ForwardBatch, each step's Q/K/V and the float64 reference
    "capture",  # graph forms: init_cuda_graph_state, guards, capture-time metadata, warm-ups, capture
    "replay",  # graph forms: per replayed batch, inputs copied in, replay metadata, the forwards
    "eager",  # init_forward_metadata and the forwards, eagerly
    "compare",  # outputs against the reference (and replay against eager)
)


class PhaseClock:
    """Accumulates wall seconds per phase; a phase may be entered more than once."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def rounded(self) -> dict[str, float]:
        return {name: round(seconds, 4) for name, seconds in self.seconds.items()}
