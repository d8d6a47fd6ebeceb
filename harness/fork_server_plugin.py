"""pytest wiring of harness/fork_server.py: an xdist run's workers forked from pre-imported libraries.

On the controller of a run whose workers are local processes (`-n N`, plain `popen`), the server
starts while pytest configures, before pytest-xdist starts its workers, and each worker is started
through it (`popen//python=...`). `--worker-start exec` keeps xdist's own way: a fresh interpreter
per worker. The server's log (its imports, their seconds, anything it refused) is
`fork-server.log` in the run folder.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from harness import fork_server
from harness.results import run_dir

WORKER_STARTS = ("fork", "exec")
SERVER_LOG = "fork-server.log"


def pytest_addoption(parser):
    parser.getgroup("attn-harness").addoption(
        "--worker-start", default=WORKER_STARTS[0] if sys.platform == "linux" else WORKER_STARTS[1],
        choices=WORKER_STARTS,
        help="how xdist workers start: forked from a server that has imported torch, transformers and "
             "the other heavy libraries once (Linux, the default), or each a fresh interpreter")


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
