"""A failing generated cell -> the smallest case that still fails the same way, as case YAML.

Hypothesis shrinks: the draw's pass is replayed with shrinking on, every draw
before the failing one is passed over unrun, and from the failing draw on each
candidate of the failing cell's attention family (harness/families) runs in a worker
process (harness/search/cell_worker.py) and counts as failing only if it fails in the
same class (harness/ledger/failure_class.py).
Hypothesis ends on its smallest such candidate, which is written as a case
file ready to copy into cases/, with the one-line command that reruns it.
Candidates not yet run when the time budget is spent count as passing, so the
search winds down on what it has.
"""

from __future__ import annotations

import json
import queue
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness import ROOT
from harness.search.case_strategy import DrawnCase
from harness.case.cases import fields_of, spec_from_fields
from harness.cell.cell_matrix import case_file_rerun, expand_cells, repo_path
from harness.families import family_of_backend
from harness.search.cell_worker import OUTCOME_MARK
from harness.search.draw_caps import DrawProfile
from harness.ledger.failure_class import CRASHED, TIMED_OUT
from harness.search.generated import Generated, as_case, generated_name, run_pass


class CellExecutor:
    """One worker process at a time, replaced when a candidate kills or stalls it."""

    def __init__(self, patches: list[str], timeout_s: float):
        """``patches``: the run's patch options (cell_matrix.patch_args), applied in the worker."""
        self.command = [sys.executable, "-m", "harness.search.cell_worker", *patches]
        self.timeout_s = timeout_s
        self.process: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()

    def _start(self) -> None:
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self.process.stdout, self.lines), daemon=True).start()

    @staticmethod
    def _pump(stream, lines: queue.Queue) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)  # the worker ended

    def run(self, drawn: DrawnCase) -> dict:
        if self.process is None or self.process.poll() is not None:
            self._start()
        self.process.stdin.write(json.dumps({"mode": drawn.mode, "fields": drawn.fields}) + "\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + self.timeout_s
        try:
            while (line := self.lines.get(timeout=max(deadline - time.monotonic(), 0))) is not None:
                if line.startswith(OUTCOME_MARK):
                    return json.loads(line[len(OUTCOME_MARK):])
            status, failure = "crashed", CRASHED
        except queue.Empty:
            status, failure = "timeout", TIMED_OUT
        self.close()
        return dict(status=status, failure=failure, message=failure)

    def close(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        self.process = None


class _SameFailure(Exception):
    """Raised for hypothesis: this candidate fails the way the original did."""


@dataclass
class Shrunk:
    source_cell: str
    failure: str
    message: str
    case_name: str
    case_file: Path
    rerun: str
    runs: int
    wall_s: float
    fields: dict = field(repr=False)

    def as_report(self) -> dict:
        return dict(source_cell=self.source_cell, failure=self.failure, message=self.message,
                    case=self.case_name, case_file=repo_path(str(self.case_file)),
                    rerun=self.rerun, runs=self.runs, wall_s=round(self.wall_s, 1))


@dataclass
class _Search:
    target: DrawnCase
    failure: str
    executor: CellExecutor
    deadline: float
    reached: bool = False
    smallest: DrawnCase | None = None
    outcomes: dict = field(default_factory=dict)

    def visit(self, drawn: DrawnCase) -> None:
        if not self.reached:
            if drawn.key != self.target.key:
                return  # an earlier draw of the pass: it passed in the run, so it is not rerun
            self.reached = True
        if _family(drawn) != _family(self.target):
            return  # another family's model is another sglang path: not the same failure, not run
        if drawn.key not in self.outcomes:
            self.outcomes[drawn.key] = (self.executor.run(drawn) if time.monotonic() < self.deadline
                                        else dict(status="not run", failure=None, message="budget spent"))
        if self.outcomes[drawn.key]["failure"] == self.failure:
            self.smallest = drawn
            raise _SameFailure


def _family(drawn: DrawnCase) -> str:
    return family_of_backend(drawn.fields["backends"][0])


def write_case(path: Path, mode: str, spec_fields: dict, comments: list[str]) -> None:
    """A case file with one case, every field explicit, so later default changes cannot alter it."""
    case = fields_of(spec_from_fields(spec_fields))
    family = case.pop("family")  # the file's, never a case's (harness/case/cases.py FILE_FIELDS)
    document = yaml.safe_dump({"mode": mode, "family": family, "cases": [case]}, sort_keys=False,
                              default_flow_style=None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"# {line}\n" for line in comments) + document)


def shrink(generated: Generated, first: dict, profile: DrawProfile, seed: int, patches: list[str],
           out_dir: Path, budget_s: float, executor: CellExecutor) -> Shrunk | str:
    """Shrink a generated cell whose rerun alone failed with outcome ``first``.

    Returns the reproducer, or a sentence saying why there is none.
    """
    started = time.monotonic()
    target = generated.draw.drawn
    search = _Search(target, first["failure"], executor, started + budget_s, outcomes={target.key: first})
    try:
        run_pass(profile, seed, generated.draw.pass_number, search.visit, shrink=True)
    except _SameFailure:
        pass
    if search.smallest is None:
        return f"{generated.case.case_id}: hypothesis did not replay the failing draw"
    smallest = search.smallest
    name = f"{generated_name(seed, generated.index, spec_from_fields(smallest.fields))}-min"
    path = out_dir / f"{name}.yaml"
    (cell,) = expand_cells([as_case(smallest, name, str(path))])
    rerun = case_file_rerun(cell.cell_id, patches, out_dir)
    runs = sum(o["status"] != "not run" for o in search.outcomes.values())
    wall = time.monotonic() - started
    outcome = search.outcomes[smallest.key]
    write_case(path, smallest.mode, {**smallest.fields, "name": name}, [
        f"Shrunk by hypothesis from generated cell {generated.case.case_id}",
        f"({profile.name} profile, seed {seed}, draw {generated.index}"
        f"{f', with {shlex.join(patches)}' if patches else ''}):",
        f"{runs} cells run in {wall:.0f} s. Fails as: {search.failure}",
        f"First message: {outcome['message'][:300]}",
        f"Rerun: {rerun}",
        "Copy this file into cases/ to keep the case.",
    ])
    return Shrunk(generated.case.case_id, search.failure, outcome["message"], name, path, rerun, runs, wall,
                  smallest.fields)
