"""Running never dirties the checkout; recording a run is a separate, explicit step.

`python -m harness run` (and every other command) writes under out/; `python -m harness record`
copies what RECORDED keeps into reports/<section>/ and regenerates the docs matrix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from harness import ROOT
from harness.session.record import RECORDED, NothingToRecord, PartOverWhole, record
from harness.reporting.cell_schema import load_results
from harness.reporting.test_reporting import CELLS, README, RUN, write_results
from harness.base.results import CELLS_DIR, OUTPUT_DIR, RUN_ID_ENV

pytestmark = pytest.mark.release_independent

# One cheap cell of the real matrix (float32 Triton, eager: it runs on the CPU interpreter too).
CHEAP_CELL = "draft_decode-chain-bs2-dtypefloat32-triton-eager"


@pytest.fixture
def run_folder(tmp_path):
    """An output folder as runs leave it: kept files, a file no section keeps, a reproducer."""
    source = tmp_path / "out" / "gpu"
    (source / "reproducers").mkdir(parents=True)
    write_results(source / "results.json", CELLS)
    for name in ("SUMMARY.md", "KILL_TABLE.md", "DIGEST.md", "reproducers/gen0-1-min.yaml"):
        (source / name).write_text(f"{name}\n")
    return source


def test_record_copies_what_the_section_keeps_and_regenerates_the_matrix(run_folder, tmp_path):
    recorded, page = tmp_path / "reports", tmp_path / "results.md"
    page.write_text(README)
    (recorded / "gpu").mkdir(parents=True)
    (recorded / "gpu" / "BENCH.md").write_text("earlier sessions\n")
    written = record("gpu", run_folder, recorded, page)
    kept = {"results.json.gz", "SUMMARY.md", "KILL_TABLE.md", "reproducers/gen0-1-min.yaml"}
    assert {str(path.relative_to(recorded / "gpu")) for path in written if path != page} == kept
    assert load_results(recorded / "gpu" / "results.json.gz") == load_results(run_folder / "results.json")
    assert (recorded / "gpu" / "results.json.gz").read_bytes() == record("gpu", run_folder, recorded, page)[0].read_bytes()
    assert page in written and "| triton | eager | 2/2 |" in page.read_text()
    assert not (recorded / "gpu" / "DIGEST.md").exists()  # not in the table: a run's own output only
    assert (recorded / "gpu" / "BENCH.md").read_text() == "earlier sessions\n"  # not written again: kept
    assert page not in record("gpu", run_folder, recorded, page)  # the page is already current


def test_a_part_of_the_matrix_does_not_replace_a_recorded_whole_unless_asked(run_folder, tmp_path):
    recorded, page = tmp_path / "reports", tmp_path / "results.md"
    page.write_text(README)
    (recorded / "gpu").mkdir(parents=True)
    record("gpu", run_folder, recorded, page)
    whole = recorded / "gpu" / "results.json.gz"
    write_results(run_folder / "results.json", CELLS[:2], run={**RUN, "selection": {"keyword": "fa3", "shard": "1/1"}})
    with pytest.raises(PartOverWhole, match=r"selected -k 'fa3'.*--partial"):
        record("gpu", run_folder, recorded, page)
    assert len(load_results(whole)["cells"]) == len(CELLS)  # left as it was
    record("gpu", run_folder, recorded, page, partial=True)
    assert len(load_results(whole)["cells"]) == 2


def test_a_folder_with_nothing_to_record_says_what_would_be_kept(tmp_path):
    with pytest.raises(NothingToRecord, match=r"nothing to record for section versions; it keeps VERSIONS\.md"):
        record("versions", tmp_path, tmp_path / "reports", tmp_path / "results.md")


def test_every_recorded_section_has_its_folder_under_reports():
    assert all((ROOT / "reports" / section).is_dir() for section in RECORDED)


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None,
                    reason="needs the harness as a git checkout and git")
def test_a_run_leaves_a_clean_clone_clean(tmp_path):
    """What is committed, cloned fresh, runs a cell through the real entry point and stays clean."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV and not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "harness", "run", "-n", "0", "--section", "cpu", "--", "-k", CHEAP_CELL],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "attn-harness: all 1 collected cells accounted for: 1 passed" in lines, done.stdout[-3000:]
    output = clone / OUTPUT_DIR.relative_to(ROOT)
    assert lines[-1].startswith(f"reports written to {output / 'cpu-partial'}: this run selected -k"), lines[-1]
    assert (output / "cpu-partial" / "results.json").is_file() and (output / "cpu-partial" / "SUMMARY.md").is_file()
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=clone, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert [line for line in status if not line.endswith("__pycache__/")] == [f"!! {output.name}/"], status


def _session_without_cells(run: str) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, RUN_ID_ENV: run}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "harness/base/test_platform.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_session_that_runs_no_cell_leaves_no_run_folder():
    """The test command runs sessions of the harness's own tests in subprocesses: none leaves an empty
    (or cell-less) out/cells/<run>/ behind."""
    run = f"no-cell-{uuid.uuid4().hex[:8]}"
    _session_without_cells(run)
    assert not (CELLS_DIR / run).exists(), sorted(path.name for path in (CELLS_DIR / run).iterdir())


def test_a_session_inside_a_run_leaves_the_outer_run_folder_alone():
    """A pytest a test starts inherits the outer run's id, so its folder is the outer run's: a session
    that ran no cell removes only a folder it made (once it removed the outer run's records, and the
    outer run lost 540 cells as not run)."""
    folder = CELLS_DIR / f"outer-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    try:
        (folder / "gw0.jsonl").write_text("{}\n")
        _session_without_cells(folder.name)
        assert (folder / "gw0.jsonl").read_text() == "{}\n"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
