"""An xdist worker leaves as soon as the controller has its results, without interpreter teardown.

The controller's session does not end until every worker process has ended (xdist's
teardown_nodes joins each execnet gateway). A worker that imported sglang and holds a CUDA context
then spends seconds unloading thousands of modules and destroying the context, and the run waits
for the slowest of them: 7.3 s of wind-down in a 68 s warm hand matrix on the H200, 3.2 s in
teardown_nodes with 2 workers on the 2-core CPU (2026-11-26). By the last pytest_unconfigure the
worker has sent xdist its "workerfinished" report (pytest_sessionfinish), every cell it ran is a
line written to the run folder (harness/base/results.py append_record), and its GPU slot lock is one
the kernel drops with the process (harness/speed/gpu_slots.py), so leaving with os._exit loses nothing.
"""

from __future__ import annotations

import os
import sys

import pytest


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
