"""Sanitizer re-runs: crashed or failing cells re-run alone under NVIDIA compute-sanitizer.

An out-of-bounds write can kill a later cell or leave the numbers right; memcheck names the
kernel, the thread and the address of the first bad access, racecheck the first shared-memory
hazard. The first error block of each tool goes into the cell's record (`sanitizer`:
{tool: block}). Where the sanitizer cannot run (no GPU, no binary, a device it does not support),
the run says so in one line instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Sequence

from harness.base import platform
from harness.ledger.lone_run import LONE_TIMEOUT_S, run_alone

PREFIX = "========="  # compute-sanitizer's default line prefix
TOOL_FLAGS = {
    # API-error reports are off: a PyTorch process makes benign failing CUDA calls (capability
    # probes), and the first *device* error is the finding that matters.
    "memcheck": ("--tool", "memcheck", "--report-api-errors", "no", "--leak-check", "no"),
    "racecheck": ("--tool", "racecheck"),
}
COMMON_FLAGS = ("--print-limit", "10")
SANITIZED_STATUSES = ("crashed", "failed")
# Without --sanitize, a GPU run re-runs its crashed cells under memcheck: a crash is rare, costs one lone
# run to explain, and a flaky one may not come back (reports/gpu/TRIAGE.md, gen11-17).
AUTO_TOOLS, AUTO_STATUSES = ("memcheck",), ("crashed",)
SANITIZE_MAX_DEFAULT = 3
# Lines in the prefix's voice that frame a report rather than being a finding.
FRAMING = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
           "Target application returned an error")
# Messages that mean the sanitizer itself could not check this process.
CANNOT_RUN = ("Device not supported", "is not supported on this", "Unable to find injection library",
              "Target application terminated before first instrumented API call",
              "No attachable process found")
BACKTRACE = "Saved host backtrace"  # from here on a block lists host frames: noise for a record
BLOCK_CHARS = 1500


def find_binary(environ=os.environ) -> str | None:
    """compute-sanitizer on PATH, else in a CUDA toolkit (both layouts it ships in)."""
    on_path = shutil.which("compute-sanitizer", path=environ.get("PATH"))
    if on_path:
        return on_path
    homes = [environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        for relative in ("bin/compute-sanitizer", "compute-sanitizer/compute-sanitizer"):
            if os.access(Path(home) / relative, os.X_OK):
                return str(Path(home) / relative)
    return None


def unavailable_reason(has_gpu: bool, binary: str | None) -> str | None:
    """Why the sanitizer cannot run on this machine at all, or None."""
    if not has_gpu:
        return "no CUDA GPU on this machine (compute-sanitizer checks CUDA kernels)"
    if binary is None:
        return ("compute-sanitizer not found on PATH, in $CUDA_HOME or /usr/local/cuda "
                "(it ships with the CUDA toolkit)")
    return None


def error_blocks(log: str) -> list[str]:
    """The sanitizer's findings in order: each a header line and its indented details, host frames dropped.

    Lines without the prefix are the program's own output, interleaved when the log is stdout.
    """
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in log.splitlines():
        if line.rstrip() == PREFIX:
            current = None  # a bare prefix line ends a block
        elif not line.startswith(PREFIX + " "):
            continue
        elif not line.startswith(PREFIX + "  "):  # a header: the prefix and one space
            header = line[len(PREFIX) + 1:].strip()
            current = None if header.startswith(FRAMING) else [header]
            blocks += [current] if current else []
        elif current is not None and BACKTRACE in line:
            current = None
        elif current is not None:
            current.append(line[len(PREFIX):].strip())
    return ["\n".join(block)[:BLOCK_CHARS] for block in blocks]


def cannot_run(text: str) -> str | None:
    """The line saying the sanitizer could not check the process, or None."""
    for line in text.splitlines():
        if any(marker in line for marker in CANNOT_RUN):
            return line.removeprefix(PREFIX).strip()
    return None


def _summary_line(log: str) -> str:
    found = [line.removeprefix(PREFIX).strip() for line in log.splitlines()
             if line.startswith(PREFIX) and "SUMMARY" in line]
    return found[-1] if found else "no summary line"


def sanitize(records: Sequence[dict], tools: Sequence[str], args: list[str], budget: int, logs: Path,
             say: Callable[[str], None], timeout: float = LONE_TIMEOUT_S,
             has_gpu: bool = platform.HAS_GPU, statuses: Sequence[str] = SANITIZED_STATUSES
             ) -> tuple[dict[str, dict], str | None]:
    """Re-run up to `budget` cells of ``statuses`` (crashed or failed) under each tool.

    Returns the fields to add to those cells' records, and one line when the sanitizer could not
    run here (None when it could).
    """
    picked = [record for record in records if record["status"] in statuses][:budget]
    if statuses == AUTO_STATUSES and not picked:
        return {}, None  # the default re-run of crashes: nothing crashed, nothing to say
    binary = find_binary()
    reason = unavailable_reason(has_gpu, binary)
    if reason:
        return {}, f"sanitizer not run: {reason}"
    if not picked:
        say(f"sanitizer: no {' or '.join(statuses)} cell to re-run")
    logs.mkdir(parents=True, exist_ok=True)
    notes: dict[str, dict] = {}
    for index, record in enumerate(picked):
        findings = {}
        for tool in tools:
            log_path = logs / f"{tool}-{index}.log"
            prefix = (binary, *TOOL_FLAGS[tool], *COMMON_FLAGS, "--log-file", str(log_path))
            outcome = run_alone(record["nodeid"], args, f"sanitize-{tool}-{index}", prefix=prefix, timeout=timeout)
            log = log_path.read_text(errors="replace") if log_path.exists() else ""
            blocked = cannot_run(log + "\n" + outcome.output)
            if blocked:
                return notes, f"sanitizer cannot run on this machine: {blocked}"
            blocks = error_blocks(log)
            findings[tool] = blocks[0] if blocks else f"no error found ({_summary_line(log)}); alone: {outcome.message}"
            say(f"{tool}: {record['cell_id']}: {findings[tool].splitlines()[0]} (log: {log_path})")
        notes[record["cell_id"]] = {"sanitizer": findings}
    return notes, None
