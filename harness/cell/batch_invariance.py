"""Batch invariance: a request's output must not depend on the requests batched with it.

A backend that reads a neighbour's key, or sizes a request's work from the batch around it, can
stay inside every tolerance: one wrong key among thousands moves an output below a bf16 ulp of
the tolerance. Running the request again with the batch cut away shows it at any size. A case
with ``batch_invariance`` runs, on the backend its batch ran on (as a server runs the next batch):

- each sampled request alone: the boundary rows (first, last, longest, shortest) and
  RANDOM_ROWS more drawn from the case's seed;
- the first half of the batch, so the half's last request loses its neighbour and the batch size
  changes.

Each such run is compared with the rows of its requests in the whole batch's eager run: bitwise
where the case asks sglang for deterministic inference (its batch-invariant kernels), else within
the dtype's tolerance, counting both runs' rounding. Padding and capture sizes are the graph
cells' part: their replays are compared with eager the same way (harness/cell/run_cell.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from harness.base.case_spec import CaseSpec
from harness.fixtures.pools import StepInputs
from harness.modes.base import ForwardStep

RANDOM_ROWS = 2  # sampled requests beyond the boundary rows; a batch of at most 4 + this runs every request alone


@dataclass(frozen=True)
class Cut:
    """Requests [start, stop) of a case's batch, run as a batch of their own."""

    start: int
    stop: int

    @property
    def label(self) -> str:
        if self.stop - self.start == 1:
            return f"request {self.start} alone"
        return f"requests {self.start}..{self.stop - 1} as a batch"

    def spec(self, spec: CaseSpec) -> CaseSpec:
        """The case's value for just these requests; they keep their numbers for what is drawn per request."""
        windows = None if spec.input_lens is None else spec.input_lens[self.start:self.stop]
        return spec.model_copy(update=dict(prefix_lens=spec.prefix_lens[self.start:self.stop], input_lens=windows,
                                           first_request=spec.first_request + self.start))


def sampled_requests(spec: CaseSpec) -> list[int]:
    """The requests run alone: first, last, longest and shortest prefix, and RANDOM_ROWS more (case seed)."""
    lens = spec.prefix_lens
    boundary = {0, spec.bs - 1, lens.index(max(lens)), lens.index(min(lens))}
    others = sorted(set(range(spec.bs)) - boundary)
    return sorted(boundary | set(random.Random(spec.seed).sample(others, min(RANDOM_ROWS, len(others)))))


def cuts(spec: CaseSpec) -> list[Cut]:
    """Every batch the check runs: each sampled request alone, then the first half (from 4 requests on)."""
    alone = [Cut(request, request + 1) for request in sampled_requests(spec)] if spec.bs > 1 else []
    return alone + ([Cut(0, spec.bs // 2)] if spec.bs >= 4 else [])


def rows_of(step: ForwardStep, cut: Cut) -> list[int]:
    """The step's query rows that belong to the cut's requests, in batch order."""
    return [row for row, query in enumerate(step.queries) if cut.start <= query.request < cut.stop]


def cut_inputs(steps: list[ForwardStep], inputs: list[StepInputs], cut: Cut,
               cut_steps: list[ForwardStep]) -> list[StepInputs]:
    """The whole batch's draws for the cut's rows: the same Q and new K/V (rewritten to the same slots),
    the reference and the census parts. Raises if the mode lays the cut's queries out otherwise than
    the batch did (the rows would not be the same queries)."""
    sliced = []
    for index, (step, drawn, cut_step) in enumerate(zip(steps, inputs, cut_steps, strict=True)):
        rows = rows_of(step, cut)
        if len(rows) != len(cut_step.queries) or any(step.queries[row].spans != query.spans
                                                     for row, query in zip(rows, cut_step.queries)):
            raise AssertionError(f"{cut.label}, step {index}: the mode lays out {len(cut_step.queries)} queries "
                                 f"where the batch had {len(rows)} for these requests, or other keys for them")
        pick = lambda tensor: None if tensor is None else tensor[rows]  # noqa: E731
        sliced.append(StepInputs(pick(drawn.q), pick(drawn.k), pick(drawn.v), pick(drawn.expected),
                                 {split: part[rows] for split, part in drawn.census.items()}))
    return sliced
