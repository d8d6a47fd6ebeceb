"""A run with sglang patched (--replay a seed bug, --apply-fix a fix) says so in its session header and
in each failure's own message, so that nobody reading one failure takes the planted bug for a new one."""

from __future__ import annotations

import re
import subprocess
import sys

from harness import ROOT
from harness.bugs.seed_bugs import SEED_BUGS

# One cheap cell the seed bug fails on the CPU (float32 Triton, the graph-metadata stand-in).
BUG = "pr26651-seq-lens"
CELL = "draft_extend_v2-window4-bs2-dtypefloat32-triton-cg_meta-cbs2-nopad"


def test_a_replay_names_its_bug_in_the_header_and_in_the_failure():
    done = subprocess.run([sys.executable, "-m", "pytest", f"harness/test_cases.py::test_cell[{CELL}]", "--replay", BUG,
                           "-p", "no:cacheprovider", "-rf", "-vv"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    header = f"sglang patched for this run: replaying seed bug {BUG} ({SEED_BUGS[BUG].upstream}: {SEED_BUGS[BUG].summary})"
    assert header in done.stdout
    assert f"FAILED harness/test_cases.py::test_cell[{CELL}] - [replay {BUG}] AssertionError: {CELL} differs" \
        in done.stdout  # -vv: pytest shortens a summary line to the terminal's width otherwise
    assert re.search(rf"-+ patched sglang -+\nreplaying seed bug {BUG} ", done.stdout)  # the failure's own section
