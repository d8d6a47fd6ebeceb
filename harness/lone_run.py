"""Run one cell alone in a fresh pytest process and say what became of it.

A crash in a shared worker is not proof against the cell that was running: under Triton's CPU
interpreter an out-of-bounds write by one cell can kill a later one, and on a GPU a stray write
can poison the context for whoever launches next. Only the cell alone, in a process of its own,
tells. Crash attribution (harness/crash_attribution.py) and sanitizer re-runs
(harness/sanitizer.py) both use this; the lone run's own records go to a sub-folder of the run
folder, which merge does not read.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.cases import CASES_DIR
from harness.results import REPORTS_DIR, RUN_ID_ENV, read_records, run_id

ROOT = Path(__file__).resolve().parent.parent
LONE_TIMEOUT_S = 600


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


@dataclass(frozen=True)
class LoneOutcome:
    status: str | None  # the cell's status alone ("crashed" also for a process killed by a signal); None: unknown
    message: str  # one line: what the lone run recorded, the signal that killed it, or why nothing was learned
    output: str  # the process's stdout and stderr


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
    record = next((r for r in read_records(REPORTS_DIR / "cells" / lone_id).values() if r.get("nodeid") == nodeid),
                  None)
    if record is not None:
        status = None if record["status"] == "not_run" else record["status"]  # not_run says nothing of the cell
        return LoneOutcome(status, f"{record['status']}: {record.get('reason') or 'no message'}", output)
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        fatal = _fatal_line(output)
        return LoneOutcome("crashed", f"crashed: process killed by {name}" + (f" ({fatal})" if fatal else ""), output)
    return LoneOutcome(None, f"no result recorded (exit {done.returncode}): {_last_line(output)}", output)
