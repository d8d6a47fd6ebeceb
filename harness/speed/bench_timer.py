"""Phase timestamps of one pytest process, for `python -m harness.speed.bench` (`-p harness.speed.bench_timer`).

Every process of a timed run (the controller and each xdist worker) appends one JSON line to the
file named by ATTN_HARNESS_BENCH_TIMES when its session ends: when the process started, when
pytest was configured (interpreter, pytest, the harness and torch imported, case files read),
when collection finished (the test module and sglang imported, the cells built and their skips
marked), and when its first cell started and its last cell ended. The benchmark turns them into
the split of a run's wall time. Without the variable the plugin records nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

TIMES_ENV = "ATTN_HARNESS_BENCH_TIMES"


def process_started() -> float:
    """When this process started, in epoch seconds (Linux /proc, to 10 ms); now where /proc is missing."""
    try:
        since_boot = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - (uptime - since_boot)


_MARKS: dict[str, float] = {"started": process_started()}


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    _MARKS["configured"] = time.time()


def pytest_collection_finish(session):
    _MARKS["collected"] = time.time()


def pytest_runtest_logstart(nodeid, location):
    _MARKS.setdefault("first_cell", time.time())


def pytest_runtest_logfinish(nodeid, location):
    _MARKS["last_cell"] = time.time()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    target = os.environ.get(TIMES_ENV)
    if not target:
        return
    line = {"process": os.environ.get("PYTEST_XDIST_WORKER", "controller"), "pid": os.getpid(),
            "worker": hasattr(session.config, "workerinput"), **_MARKS, "finished": time.time()}
    with open(target, "a") as handle:
        handle.write(json.dumps(line) + "\n")
