"""pytest wiring of harness/speed/fork_server.py: an xdist run's workers forked from pre-imported libraries.

On the controller of a run whose workers are local processes (`-n N`, plain `popen`), the server
starts while pytest configures, before pytest-xdist starts its workers, and each worker is started
through it (`popen//python=...`). `--worker-start exec` keeps xdist's own way: a fresh interpreter
per worker. The server's log (its imports, their seconds, each fork, anything it refused) is
`fork-server.log` in the run folder.

Forking is the default on Linux. On the H200 a worker started in 2.8 s forked against 12.2 s fresh,
and the hand matrix ran warm in 34.8-40.7 s against 39.9 s (reports/gpu/BENCH.md). On the 2-core CPU
machine the workers start later (7.1-7.5 s against 5.0-5.3 s: two workers importing side by side
against one server importing before either), but their cells run sooner, since what a fresh worker
imports during its first cells is imported already: 123.0 s for 77 Triton draft-decode cells
against 125.0 and 128.4 s fresh (reports/cpu/BENCH.md).
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from harness.speed import fork_server
from harness.base.results import run_dir

WORKER_STARTS = ("fork", "exec")
SERVER_LOG = "fork-server.log"
DEFAULT_WORKER_START = "fork" if sys.platform == "linux" else "exec"


def pytest_addoption(parser):
    parser.getgroup("attn-harness").addoption(
        "--worker-start", default=DEFAULT_WORKER_START, choices=WORKER_STARTS,
        help="how xdist workers start: forked from a server that has imported torch, transformers and "
             f"the other heavy libraries once (Linux), or each a fresh interpreter (default here: "
             f"{DEFAULT_WORKER_START})")


def _local_workers(config) -> list[str]:
    """xdist's worker specs when they are all plain local processes, else nothing to change."""
    specs = getattr(config.option, "tx", None) or []
    return specs if specs and all(spec == "popen" for spec in specs) else []


@pytest.hookimpl(tryfirst=True)  # the server's imports start as early as the run's options are known
def pytest_configure(config):
    if hasattr(config, "workerinput") or config.getoption("--worker-start") != "fork":
        return
    specs = _local_workers(config)
    if not specs or getattr(config.option, "dist", "no") == "no":
        return
    name = fork_server.new_name()
    with open(run_dir() / SERVER_LOG, "ab") as log:
        config._attn_fork_server = subprocess.Popen(fork_server.serve_command(name), stdin=subprocess.DEVNULL,
                                                    stdout=log, stderr=subprocess.STDOUT)
    python = shlex.join(fork_server.connect_command(name))
    config.option.tx = [f"popen//python={python}"] * len(specs)


def pytest_unconfigure(config):
    server = getattr(config, "_attn_fork_server", None)
    if server is None:
        return
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
