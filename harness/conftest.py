"""Fixtures shared by the tests that run the harness itself in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from harness import ROOT
from harness.reporting.merge import merge_runs
from harness.base.results import MANIFEST, RUN_ID_ENV, run_folder


@pytest.fixture
def harness_run():
    """Run pytest with the arguments given in a subprocess, in a run folder of its own.

    Yields a runner that returns (the finished process, its run folder, its merged cells by id);
    the run folders are removed afterwards.
    """
    folders = []

    def run(*args, env=None):
        run_id = f"drill-{uuid.uuid4().hex[:8]}"
        folders.append(run_folder(run_id))
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                              env={**os.environ, RUN_ID_ENV: run_id, **(env or {})},
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        folder = folders[-1]
        cells = merge_runs([folder]).results["cells"] if (folder / MANIFEST).exists() else []
        return done, folder, {cell["cell_id"]: cell for cell in cells}

    yield run
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
