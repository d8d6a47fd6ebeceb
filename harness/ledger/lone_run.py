"""Run one cell alone in a fresh pytest process and say what became of it.

A crash in a shared worker is not proof against the cell that was running: under Triton's CPU
interpreter an out-of-bounds write by one cell can kill a later one, and on a GPU a stray write
can poison the context for whoever launches next. Only the cell alone, in a process of its own,
tells. Crash attribution (below) and sanitizer re-runs (harness/ledger/sanitizer.py) both use this;
the lone run's own records go to a sub-folder of the run folder, which merge does not read.

Crash attribution: each cell recorded as crashed is re-run alone to see whether the crash is
its own. A worker dies with whichever cell it was running, but the cause may be an earlier cell of the
same worker (an out-of-bounds write under Triton's CPU interpreter, a poisoned CUDA context). The
lone run's verdict goes into the cell's record: `reproduced_alone` true (its own crash), false
(it passed or failed alone: look at what ran before it in that worker), or null (not re-run, over
the budget, or the lone run told nothing), with `lone_run` saying what the lone run did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from harness import ROOT
from harness.base.results import RUN_ID_ENV, read_records, run_folder, run_id

LONE_TIMEOUT_S = 600
CONFIRM_DEFAULT = 5  # lone re-runs per session; each costs a process start (and, on a GPU, a CUDA context)


@dataclass(frozen=True)
class LoneOutcome:
    status: str | None  # the cell's status alone ("crashed" also for a process killed by a signal); None: unknown
    message: str  # one line: what the lone run recorded, the signal that killed it, or why nothing was learned
    output: str  # the process's stdout and stderr


def _fatal_line(output: str) -> str:
    """The interpreter's own last words (faulthandler's 'Fatal Python error: ...'), if any."""
    return next((line.strip() for line in output.splitlines() if line.startswith("Fatal Python error")), "")


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def run_alone(nodeid: str, args: list[str], label: str, *, prefix: tuple[str, ...] = (),
              timeout: float = LONE_TIMEOUT_S) -> LoneOutcome:
    """Run `nodeid` alone (optionally under `prefix`, e.g. compute-sanitizer); never raises for the cell's sake."""
    lone_id = f"{run_id()}/{label}"
    command = [*prefix, sys.executable, "-m", "pytest", nodeid, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
               *args, "--confirm-crashes", "0"]
    env = {**os.environ, RUN_ID_ENV: lone_id}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace") + (expired.stderr or b"").decode(errors="replace")
        return LoneOutcome(None, f"lone run timed out after {timeout:.0f} s", output)
    output = done.stdout + done.stderr
    record = next((r for r in read_records(run_folder(lone_id)).values() if r.get("nodeid") == nodeid),
                  None)
    if record is not None:
        status = None if record["status"] == "not_run" else record["status"]  # not_run says nothing of the cell
        return LoneOutcome(status, f"{record['status']}: {record.get('reason') or 'no message'}", output)
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        fatal = _fatal_line(output)
        return LoneOutcome("crashed", f"crashed: process killed by {name}" + (f" ({fatal})" if fatal else ""), output)
    return LoneOutcome(None, f"no result recorded (exit {done.returncode}): {_last_line(output)}", output)


def confirm_crashes(crashed: Sequence[dict], args: list[str], budget: int, say: Callable[[str], None],
                    timeout: float = LONE_TIMEOUT_S) -> dict[str, dict]:
    """Re-run up to `budget` crashed cells alone; return the fields to add to each crashed cell's record."""
    notes = {}
    for index, record in enumerate(crashed):
        if index >= budget:
            notes[record["cell_id"]] = {"reproduced_alone": None,
                                        "lone_run": f"not re-run: over the --confirm-crashes {budget} budget"}
            continue
        outcome = run_alone(record["nodeid"], args, f"lone-crash-{index}", timeout=timeout)
        reproduced = None if outcome.status is None else outcome.status == "crashed"
        notes[record["cell_id"]] = {"reproduced_alone": reproduced, "lone_run": outcome.message}
        say(f"crash attribution: {record['cell_id']}: "
            + {True: "reproduced alone", False: "DID NOT reproduce alone (the crash may belong to a cell "
               "that ran before it in the same worker)", None: "not confirmed alone"}[reproduced]
            + f" -> {outcome.message}")
    return notes


def attribution_summary(notes: dict[str, dict]) -> str | None:
    """One line for the end of the run: how many crashes were confirmed, refuted, left open."""
    if not notes:
        return None
    verdicts = [fields["reproduced_alone"] for fields in notes.values()]
    refuted = sorted(cell_id for cell_id, fields in notes.items() if fields["reproduced_alone"] is False)
    return (f"crash attribution: {len(notes)} crashed cells: {verdicts.count(True)} reproduced alone, "
            f"{len(refuted)} did not{': ' + ', '.join(refuted) if refuted else ''}, "
            f"{verdicts.count(None)} unconfirmed")
