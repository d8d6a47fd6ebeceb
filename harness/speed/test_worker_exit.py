"""A worker leaves without interpreter teardown, and the run still accounts for every cell
(harness/speed/worker_exit.py)."""

from __future__ import annotations

import json

from harness.base.results import MANIFEST
from harness.ledger.test_accounting import DRILL_CASES

AT_EXIT_PLUGIN = '''
import atexit, os, pathlib

def pytest_configure(config):
    if hasattr(config, "workerinput"):
        atexit.register(pathlib.Path(os.environ["AT_EXIT_MARK"], config.workerinput["workerid"]).touch)
'''


def test_workers_skip_teardown_and_every_cell_is_recorded(harness_run, tmp_path):
    (tmp_path / "at_exit_probe.py").write_text(AT_EXIT_PLUGIN)
    marks = tmp_path / "marks"
    marks.mkdir()
    done, folder, cells = harness_run("harness/test_cases.py", "-n", "2", "--cases-dir", DRILL_CASES,
                                      "-p", "at_exit_probe", "-k", "seed4 or seed5",
                                      env={"PYTHONPATH": str(tmp_path), "AT_EXIT_MARK": str(marks)})
    assert done.returncode == 0, done.stdout[-3000:]
    assert {cell["status"] for cell in cells.values()} == {"passed"} and len(cells) == 2
    assert len(json.loads((folder / MANIFEST).read_text())["cells"]) == 2
    assert not list(marks.iterdir()), "a worker ran its interpreter teardown (atexit handlers)"
