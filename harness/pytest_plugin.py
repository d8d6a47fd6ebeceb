"""pytest wiring: cells from cases/*.yaml, known failures, per-cell result lines.

Loaded from the repository's conftest.py. A malformed case file stops
collection with one clear line (pytest.UsageError), never a traceback.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from harness import platform, releases
from harness.cases import CASES_DIR, CaseFileError, load_all_cases
from harness.cell_matrix import expand_cells, in_shard
from harness.known_failures import KnownFailuresError, load_known_failures, match, stale
from harness.results import append_record, run_id, write_run_info
from harness.seed_bugs import ReplayError, inject

ROOT = Path(__file__).resolve().parent.parent
KNOWN_FAILURES = ROOT / "KNOWN_FAILURES.md"
_CONTROLLER: dict = {}  # the controller's config, for hooks that are not handed one
CRASH_MARKERS = ("illegal memory access", "CUDA error", "device-side assert", "unspecified launch failure")


def pytest_addoption(parser):
    group = parser.getgroup("attn-harness")
    group.addoption("--cases-dir", default=str(CASES_DIR), help="folder of case YAML files")
    group.addoption("--shard", default="1/1", help="run shard i of n (cells split by a hash of their id), e.g. 2/4")
    group.addoption("--replay", default=None, help="inject a seed bug (harness/seed_bugs.py) for this run")


def _parse_shard(text: str) -> tuple[int, int]:
    try:
        number, total = (int(part) for part in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {text!r}: expected i/n, e.g. 1/4") from None
    if not 1 <= number <= total:
        raise pytest.UsageError(f"--shard {text!r}: i must be between 1 and n")
    return number, total


def pytest_configure(config):
    run_id()  # set before xdist spawns workers, so all share one run folder
    platform.pin_worker_gpu(os.environ.get("PYTEST_XDIST_WORKER"))
    if config.getoption("--replay"):
        try:
            inject(config.getoption("--replay"))
        except ReplayError as error:
            raise pytest.UsageError(str(error)) from None
    config.addinivalue_line("markers", "cell: a differential cell from cases/*.yaml")
    try:
        config._attn_release = releases.installed()
        cases = load_all_cases(Path(config.getoption("--cases-dir")))
        config._attn_known = load_known_failures(KNOWN_FAILURES)
    except (CaseFileError, KnownFailuresError, releases.UnsupportedVersionError) as error:
        raise pytest.UsageError(str(error)) from None
    shard = _parse_shard(config.getoption("--shard"))
    config._attn_shard = shard
    config._attn_cells = [c for c in expand_cells(cases) if in_shard(c, shard)]
    config._attn_started = time.time()
    if not hasattr(config, "workerinput"):
        _CONTROLLER["config"] = config


def pytest_report_header(config):
    release = getattr(config, "_attn_release", None)
    if release is not None:
        return [f"sglang {release.version}: contracts of {release.contracts}"] + ([release.note] if release.note else [])
    return None


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        cells = metafunc.config._attn_cells
        metafunc.parametrize("cell", cells, ids=[c.cell_id for c in cells])


def pytest_collection_modifyitems(config, items):
    for item in items:
        cell = getattr(item, "callspec", None) and item.callspec.params.get("cell")
        if cell is None:
            continue
        entry = match(config._attn_known, cell.record_keys())
        if entry is not None:
            item.user_properties.append(("known_failure", entry.id))
            item.add_marker(pytest.mark.xfail(reason=f"known failure {entry.id}: {entry.reason}", strict=True))


@pytest.fixture
def cell_metrics(request):
    """Let the test hand its comparison figures to the result line."""

    def record(result):
        worst = result.worst
        request.node.user_properties.append(("metrics", dict(
            max_abs_err=worst.max_abs_err, max_rel_err=worst.max_rel_err,
            mismatch_frac=worst.mismatch_frac, tolerance={"atol": worst.atol, "rtol": worst.rtol})))

    return record


def _rerun(node) -> str:
    """The one-line command that reruns a test item or report's node."""
    return f"pytest {shlex.quote(node.nodeid)}"


def _cell_record(cell, status: str, reason: str | None, report, known_failure: str | None = None,
                 metrics: dict | None = None) -> dict:
    """One result line (harness/reporting/cell_schema.py), from a worker or the controller."""
    return {
        **cell.record_keys(), "status": status, "reason": reason, "known_failure": known_failure,
        **{k: None for k in ("max_abs_err", "max_rel_err", "mismatch_frac", "tolerance")},
        **(metrics or {}),
        "wall_s": round(report.duration, 4), "nodeid": report.nodeid, "rerun": _rerun(report),
    }


def _status(report, known: str | None) -> str:
    if report.skipped and hasattr(report, "wasxfail"):
        return "xfailed"
    if report.skipped:
        return "skipped"
    if report.passed and hasattr(report, "wasxfail"):
        return "xpassed"
    if report.failed and known and "XPASS" in str(report.longrepr):
        return "xpassed"
    return "passed" if report.passed else "failed"


def _reason(report) -> str | None:
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2].removeprefix("Skipped: ")
    if getattr(report, "wasxfail", None):
        return report.wasxfail
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        return (crash.message if crash else str(report.longrepr)).splitlines()[0][:500]
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cell = getattr(item, "callspec", None) and item.callspec.params.get("cell")
    if cell is None or not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    props = dict(item.user_properties)
    if report.failed and report.when == "call" and props.get("known_failure") is None:
        report.sections.append(("rerun", _rerun(report)))
    status = _status(report, props.get("known_failure"))
    reason = _reason(report)
    if status == "failed" and reason and any(m in reason for m in CRASH_MARKERS):
        status = "crashed"
    append_record(_cell_record(cell, status, reason, report, props.get("known_failure"), props.get("metrics")),
                  worker=os.environ.get("PYTEST_XDIST_WORKER", "main"))
    if status == "crashed":
        # A sticky CUDA error poisons this process: leave, so xdist replaces the
        # worker and every other cell keeps running in a clean one.
        sys.stderr.write(f"\n[attn-harness] {cell.cell_id} crashed the device context; worker exits\n")
        sys.stderr.flush()
        os._exit(3)


def pytest_runtest_logreport(report):
    """Controller side: a worker that died mid-cell (segfault, os._exit) leaves no line; write it."""
    config = _CONTROLLER.get("config")
    if config is None or "crashed while running" not in str(report.longrepr or ""):
        return
    cells = {c.cell_id: c for c in config._attn_cells}
    cell = cells.get(report.nodeid.rpartition("[")[2].rstrip("]"))
    if cell is None:
        return
    reason = str(report.longrepr).splitlines()[0][:500]
    append_record(_cell_record(cell, "crashed", reason, report), worker="controller")


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput") or not hasattr(config, "_attn_cells"):
        return
    for report in terminalreporter.stats.get("failed", []):
        terminalreporter.write_line(f"rerun: pytest {shlex.quote(report.nodeid)}")
    for entry in stale(config._attn_known, [c.record_keys() for c in config._attn_cells]):
        terminalreporter.write_line(f"STALE known failure {entry.id}: matches no cell of this run", yellow=True)


def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput") or not hasattr(config, "_attn_cells"):
        return
    info = {
        "run_id": run_id(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(config._attn_started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **platform.device_description(), "versions": platform.versions(),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "shard": "/".join(map(str, config._attn_shard)),
        "workers": getattr(config.option, "numprocesses", None) or 0,
        "replay": config.getoption("--replay"),
        "wall_s": round(time.time() - config._attn_started, 2),
    }
    write_run_info(info)
