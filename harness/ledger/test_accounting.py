"""Drills: more cells crash than pytest-xdist restarts workers for, and every cell is still accounted for.

Each drill runs pytest in a subprocess over harness/testdata/drill_cases (seven quick Triton cells
under the CPU interpreter); ATTN_HARNESS_FORCE_CRASH makes the chosen cells segfault their worker
for real. With one worker, xdist's own default gives up after 4 restarts; with xdist 3.8's
scheduling, the five crashing cells chosen here leave healthy seed4 queued after the fifth crash,
so under that default seed4 would silently never run.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import uuid

import pytest

from harness.base import platform
from harness.ledger.accounting import NOT_RUN_LIST
from harness.ledger.lone_run import confirm_crashes
from harness.reporting.junit import junit_tree
from harness.base.results import MANIFEST, RUN_ID_ENV, run_folder
from harness.cell.run_cell import FORCE_CRASH_ENV, FORCE_HANG_ENV

pytestmark = pytest.mark.release_independent

DRILL_CASES = "harness/testdata/drill_cases"
CRASHING = "*-seed[0-36]-*"  # seeds 0-3 and 6: one more than xdist restarts a single worker for
CELL = "target_verify-drill-seed{}-triton-eager"
CRASHED = {CELL.format(i) for i in (0, 1, 2, 3, 6)}
HEALTHY = {CELL.format(4), CELL.format(5)}
COLLECTED = 7
LONE_CRASH = {"cpu": "process killed by SIGSEGV", "cuda": "illegal memory access"}[platform.DEVICE]


@pytest.fixture
def drill(harness_run):
    """Run the drill matrix with one worker, CRASHING cells segfaulting (harness/conftest.py harness_run)."""

    def run(*args, env=None, crashing=CRASHING):
        return harness_run("harness/test_cases.py", "-n", "1", "--cases-dir", DRILL_CASES, *args,
                           env={FORCE_CRASH_ENV: crashing, **(env or {})})

    return run


def last_line(done) -> str:
    return done.stdout.strip().splitlines()[-1]


def test_crashes_beyond_xdist_restart_cap_every_cell_runs(drill):
    done, folder, cells = drill("--confirm-crashes", "1")
    assert done.returncode == 1, done.stdout[-3000:]
    assert len(json.loads((folder / MANIFEST).read_text())["cells"]) == COLLECTED == len(cells)
    statuses = {cell_id: cell["status"] for cell_id, cell in cells.items()}
    assert statuses == {**dict.fromkeys(CRASHED, "crashed"), **dict.fromkeys(HEALTHY, "passed")}
    # seed4 ran after the fifth crash, in a sixth worker that xdist's default (4 restarts) never starts.
    [ran_in] = [path.stem for path in folder.glob("gw*.jsonl") if CELL.format(4) in path.read_text()]
    assert int(ran_in.removeprefix("gw")) >= 5
    run = json.loads((folder / "run.json").read_text())
    assert run["worker_crashes"] == 5 and run["not_run"] == 0 and run["collected"] == COLLECTED
    assert last_line(done) == f"attn-harness: all {COLLECTED} collected cells accounted for: 2 passed, 5 crashed"
    # Crash attribution: one crash re-run alone (the budget), and it reproduced; the rest are reported open.
    verdicts = sorted((cell["reproduced_alone"] is True, cell["lone_run"]) for cell in cells.values()
                      if cell["status"] == "crashed")
    assert [confirmed for confirmed, _ in verdicts].count(True) == 1
    assert LONE_CRASH in verdicts[-1][1]
    assert all(text == "not re-run: over the --confirm-crashes 1 budget" for _, text in verdicts[:-1])
    assert "crash attribution: 5 crashed cells: 1 reproduced alone, 0 did not, 4 unconfirmed" in done.stdout


def test_a_hanging_cell_ends_its_worker_and_the_run_goes_on(drill):
    """The watchdog fires on a cell that never returns: the cell is crashed with its timeout and the
    worker's stacks (harness/cell/cell_watchdog.py); the cells after it run in a new worker."""
    hanging = CELL.format(2)
    done, folder, cells = drill("--cell-timeout", "20", "--confirm-crashes", "0", crashing="",
                                env={FORCE_HANG_ENV: hanging})
    assert done.returncode == 1, done.stdout[-3000:]
    statuses = {cell_id: cell["status"] for cell_id, cell in cells.items()}
    assert statuses == {cell_id: "crashed" if cell_id == hanging else "passed" for cell_id in statuses}
    assert len(statuses) == COLLECTED
    stacks = folder / "hangs" / f"{hanging}.txt"
    assert cells[hanging]["reason"] == f"{hanging}: no result after 20 s (--cell-timeout); the worker's stacks then: ({stacks})"
    assert "Timeout (0:00:20)!" in stacks.read_text() and "in _hang" in stacks.read_text()
    assert [path.name for path in (folder / "hangs").iterdir()] == [stacks.name]  # the other cells' files are gone
    assert last_line(done) == f"attn-harness: all {COLLECTED} collected cells accounted for: 6 passed, 1 crashed"


def test_explicit_restart_cap_leaves_cells_not_run_and_says_so(drill):
    done, folder, cells = drill("--max-worker-restart", "0", "--confirm-crashes", "0")
    assert done.returncode == 1, done.stdout[-3000:]
    assert len(cells) == COLLECTED
    not_run = sorted(cell_id for cell_id, cell in cells.items() if cell["status"] == "not_run")
    assert not_run and len(not_run) + sum(c["status"] != "not_run" for c in cells.values()) == COLLECTED
    reason = "worker pool exhausted after 1 worker crash (--max-worker-restart 0)"
    assert {cells[cell_id]["reason"] for cell_id in not_run} == {reason}
    line = last_line(done)
    assert line.startswith(f"attn-harness: {len(not_run)} of {COLLECTED} collected cells NOT RUN ({reason}): ")
    assert f"all listed in {folder / NOT_RUN_LIST}" in line
    listed = (folder / NOT_RUN_LIST).read_text().split()
    assert sorted(nodeid.partition("[")[2].rstrip("]") for nodeid in listed) == not_run
    suite = junit_tree(list(cells.values())).getroot().find("testsuite")
    errors = [case.find("error") for case in suite if case.find("error") is not None]
    assert sum(e.get("message") == f"not run: {reason}" for e in errors) == len(not_run)


def test_cap_is_kept_for_workers_that_die_before_collecting(drill, tmp_path):
    """xdist's cap guards against endless restarts of a worker that dies at start-up; lifting it must not lose that."""
    (tmp_path / "die_at_collection.py").write_text(textwrap.dedent("""
        import ctypes, os
        def pytest_collection(session):
            if os.environ.get("PYTEST_XDIST_WORKER"):
                ctypes.string_at(0)
    """))
    done, _, cells = drill("-p", "die_at_collection", "--confirm-crashes", "0",
                           env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert done.returncode == 3, done.stdout[-3000:]
    assert done.stdout.count("node down: Not properly terminated") == 5  # xdist's default for one worker, plus 1
    assert "attn-harness: 5 workers died before collecting any test" in done.stdout
    assert cells == {}


def test_lone_run_refutes_a_crash_blamed_on_a_healthy_cell(monkeypatch):
    """On CPU an out-of-bounds write can kill a later cell: alone, that cell passes, and the record says so."""
    monkeypatch.setenv(RUN_ID_ENV, f"drill-lone-{uuid.uuid4().hex[:8]}")
    monkeypatch.delenv(FORCE_CRASH_ENV, raising=False)
    blamed = {"cell_id": CELL.format(5), "nodeid": f"harness/test_cases.py::test_cell[{CELL.format(5)}]"}
    said = []
    try:
        notes = confirm_crashes([blamed], ["--cases-dir", DRILL_CASES], budget=1, say=said.append)
    finally:
        shutil.rmtree(run_folder(os.environ[RUN_ID_ENV]), ignore_errors=True)
    assert notes == {CELL.format(5): {"reproduced_alone": False, "lone_run": "passed: no message"}}
    assert "DID NOT reproduce alone" in said[0]

