"""pytest wiring: cells from cases/*.yaml, known failures, per-cell result lines, and the
account of every collected cell (harness/ledger/accounting.py) with crash attribution and sanitizer
re-runs at the session's end.

A cell a KNOWN_FAILURES.md entry covers carries a strict xfail mark that accepts one exception,
InsideSignature: the test body says how the cell failed (judge_failure), the entry decides whether
that is inside its signature (xfailed) or not (failed, a new failure); a pass is an unexpected pass.

Loaded from the repository's conftest.py. A malformed case file stops
collection with one clear line (pytest.UsageError), never a traceback.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.base import cli, platform, releases
from harness.speed import gpu_slots
from harness.ledger.accounting import NOT_RUN_LIST, Ledger
from harness.case.cases import CASES_DIR, CaseFileError, load_all_cases
from harness.cell.cell_watchdog import DEFAULT_CELL_TIMEOUT_S, timed_out, watched
from harness.cell.cell_matrix import (cell_defining_args, collectable, expand_cells, in_shard, keyword_selected,
                                 left_out_line, patch_args, rerun_command, skip_reason)
from harness.ledger.failure_class import Failure, of_dead_process
from harness.ledger.known_failures import (KNOWN_FAILURES_FILE, InsideSignature, KnownFailuresError, load_known_failures,
                                    left_out_known, match, stale, standing)
from harness.fixtures.pools import DRAW_PLACES, DRAWS_ENV
from harness.ledger.lone_run import CONFIRM_DEFAULT, LONE_TIMEOUT_S, attribution_summary, confirm_crashes
from harness.reporting.per_backend import per_backend_lines
from harness.reporting.totals import totals_line
from harness.base.results import (append_record, cell_record, left_out_records, partial_because, read_records, run_dir,
                             run_folder, run_id, runners_left_out_here, selection, write_notes, write_run_info)
from harness.ledger.sanitizer import AUTO_STATUSES, AUTO_TOOLS, SANITIZE_MAX_DEFAULT, SANITIZED_STATUSES, TOOL_FLAGS, sanitize
from harness.bugs.seed_bugs import FIXES, REPLAY, SEED_BUGS, ReplayError, apply_requested, requested_fixes
from harness.speed.warmup import compiling_alone, plan_warm_up, wait_for_warm_up

_CONTROLLER: dict = {}  # the controller's config, for hooks that are not handed one
_WARM_UP_WAITED: list = []  # this process's first cell has waited for the warm-up pass


def pytest_addoption(parser):
    group = parser.getgroup("attn-harness")
    group.addoption("--cases-dir", default=str(CASES_DIR), help="folder of case YAML files")
    group.addoption("--shard", default="1/1", help="run shard i of n (cells split by a hash of their id), e.g. 2/4")
    group.addoption("--replay", default=None, help="inject a seed bug (harness/bugs/seed_bugs.py) for this run")
    group.addoption("--apply-fix", default=None, metavar="FIX[,FIX]",
                    help="patch the installed sglang toward proposed fixes (harness/bugs/seed_bugs.py FIXES), one or several "
                         "comma-separated, for this run; known failures they fix (KNOWN_FAILURES.md fixed_by) stand "
                         "aside, so their cells must pass")
    group.addoption("--draws", default=DRAW_PLACES[0], choices=DRAW_PLACES,
                    help="where random Q/K/V are drawn: on the cell's device (fast), or on the host "
                         "(bit-identical to a CPU run of the same cell)")
    group.addoption("--known-failures", default=str(KNOWN_FAILURES_FILE), metavar="FILE",
                    help="the known-failures ledger (default: the repository's KNOWN_FAILURES.md)")
    group.addoption("--confirm-crashes", type=int, default=CONFIRM_DEFAULT, metavar="N",
                    help="re-run up to N crashed cells alone, each in a fresh process, to confirm the crash "
                         f"is theirs (default {CONFIRM_DEFAULT}; 0: off)")
    group.addoption("--sanitize", default=None, metavar="TOOLS",
                    help="GPU: re-run crashed or failed cells alone under compute-sanitizer with these tools "
                         f"({', '.join(TOOL_FLAGS)}; comma-separated) and attach each tool's first error; "
                         "left out, a GPU run re-runs its crashed cells under memcheck; 'none': no re-run")
    group.addoption("--sanitize-max", type=int, default=SANITIZE_MAX_DEFAULT, metavar="N",
                    help=f"cells to re-run under --sanitize (default {SANITIZE_MAX_DEFAULT})")
    group.addoption("--lone-timeout", type=float, default=LONE_TIMEOUT_S, metavar="S",
                    help=f"seconds allowed to each lone re-run (default {LONE_TIMEOUT_S})")
    group.addoption("--cell-timeout", type=float, default=DEFAULT_CELL_TIMEOUT_S, metavar="S",
                    help=f"end a worker whose cell runs past S seconds, recording the cell as crashed with the "
                         f"worker's stacks (harness/cell/cell_watchdog.py; default {DEFAULT_CELL_TIMEOUT_S:g}; 0: off)")
    group.addoption("--no-warm-up", action="store_true",
                    help="GPU: skip the pass that compiles each kernel configuration once before the cells "
                         "(harness/speed/warmup.py)")


def _parse_shard(text: str) -> tuple[int, int]:
    try:
        return cli.parse_shard(text)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def _sanitizer_plan(text: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tools, the statuses whose cells they re-run) for --sanitize: what it names for crashed and failed
    cells; nothing for 'none'; left out, memcheck for crashed cells on a GPU host (harness/ledger/sanitizer.py
    AUTO_TOOLS), nothing on a CPU."""
    if text is None:
        return (AUTO_TOOLS, AUTO_STATUSES) if platform.HAS_GPU else ((), ())
    if text.strip() == "none":
        return (), ()
    tools = tuple(tool.strip() for tool in text.split(",") if tool.strip())
    unknown = [tool for tool in tools if tool not in TOOL_FLAGS]
    if unknown or not tools:
        raise pytest.UsageError(f"--sanitize {text!r}: expected 'none' or a comma-separated list of "
                                f"{', '.join(TOOL_FLAGS)}")
    return tools, SANITIZED_STATUSES


def _check_counts(config) -> None:
    for option in ("--confirm-crashes", "--sanitize-max", "--lone-timeout", "--cell-timeout"):
        if config.getoption(option) < 0:
            raise pytest.UsageError(f"{option} {config.getoption(option)}: must be 0 or more")


def pytest_configure(config):
    run_id()  # set before xdist spawns workers, so all share one run folder
    # A pytest started inside a run (a test of the harness running pytest) inherits the run id: the
    # folder is then the outer run's, and only the session that made a folder may remove it.
    config._attn_made_run_folder = not run_folder(run_id()).exists()
    os.environ[DRAWS_ENV] = config.getoption("--draws")  # likewise inherited by the workers
    gpu_slots.pin_worker(run_folder(run_id()) / gpu_slots.SLOTS_DIR)  # before CUDA starts; made only if used
    try:
        apply_requested(config.getoption("--replay"), config.getoption("--apply-fix"))
    except ReplayError as error:
        raise pytest.UsageError(str(error)) from None
    config.addinivalue_line("markers", "cell: a differential cell from cases/*.yaml")
    try:
        config._attn_release = releases.installed()
        cases = load_all_cases(Path(config.getoption("--cases-dir")))
        config._attn_known = standing(load_known_failures(config.getoption("--known-failures")),
                                      config.getoption("--apply-fix"))
    except (CaseFileError, KnownFailuresError, releases.UnsupportedVersionError) as error:
        raise pytest.UsageError(str(error)) from None
    except OSError as error:  # a --known-failures file that cannot be read
        raise pytest.UsageError(cli.os_problem(error)) from None
    shard = _parse_shard(config.getoption("--shard"))
    config._attn_sanitize = _sanitizer_plan(config.getoption("--sanitize"))
    _check_counts(config)
    config._attn_shard = shard
    if platform.HAS_GPU and getattr(config.option, "maxschedchunk", False) is None:
        config.option.maxschedchunk = 1  # see _compiling_alone_first
    matrix = [c for c in expand_cells(cases) if in_shard(c, shard)]
    config._attn_cells, config._attn_left_out = collectable(matrix)
    collected = {cell.cell_id for cell in config._attn_cells}
    config._attn_left_out_cells = [cell.record_keys() for cell in matrix if cell.cell_id not in collected]
    config._attn_cell_args = cell_defining_args(config.getoption)
    config._attn_started = time.time()
    if not hasattr(config, "workerinput"):
        config._attn_ledger = Ledger.open(config.option)
        _CONTROLLER["config"] = config
    else:  # the host's cores shared among the workers, not each worker's torch taking all of them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // config.workerinput["workercount"]))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's controller skips collection
def pytest_collection(session):
    """Start the warm-up pass (harness/speed/warmup.py) on a GPU host, over the cells the run will select
    (the generated ones were drawn at session start); the workers start and collect alongside it."""
    config = session.config
    if (hasattr(config, "workerinput") or not platform.HAS_GPU or config.option.collectonly
            or config.getoption("--no-warm-up") or not hasattr(config, "_attn_cells")):
        return None
    plan = plan_warm_up(_selected_cells(config), getattr(config.option, "numprocesses", None) or 1, run_dir())
    config._attn_warm_up = plan
    if plan.to_compile:
        config._attn_warm_up_thread = plan.start(patch_args(config.getoption))
    else:
        plan.seconds = 0.0
    return None


def pytest_collection_finish(session):
    config = session.config
    if platform.HAS_GPU and any(skip_reason(cell) is None for cell in getattr(config, "_attn_cells", [])):
        from harness.cell.run_cell import import_sglang

        import_sglang()  # here rather than in the first cell: alongside a warm-up pass, not after it
    if not (hasattr(config, "workerinput") or config.option.collectonly) and hasattr(config, "_attn_ledger"):
        _collected(config, [item.nodeid for item in session.items])


def pytest_runtest_setup(item):
    if not _WARM_UP_WAITED and _cell_id(item) not in getattr(item.config, "_attn_compiling_alone", ()):
        wait_for_warm_up(run_dir())
        _WARM_UP_WAITED.append(True)


def pytest_report_header(config):
    release = getattr(config, "_attn_release", None)
    if release is None:
        return None
    patched = _patches_line(config)
    return ([f"sglang {release.version}: contracts of {release.contracts}"] + ([release.note] if release.note else [])
            + ([f"sglang patched for this run: {patched}"] if patched else []))


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        cells = metafunc.config._attn_cells
        metafunc.parametrize("cell", cells, ids=[c.cell_id for c in cells])


def _item_cell(item):
    """The cell a test item runs, or None for a test that is not a cell."""
    return getattr(item, "callspec", None) and item.callspec.params.get("cell")


def _cell_id(item) -> str | None:
    cell = _item_cell(item)
    return None if cell is None else cell.cell_id


def _selected_cells(config) -> list:
    """The run's cells that the -k expression keeps (xdist's controller never collects items to ask)."""
    return [cell for cell in config._attn_cells if keyword_selected(cell, config.option.keyword)]


def _compiling_alone_first(config, items) -> None:
    """On a GPU, the cells that compile a kernel configuration of their own run first, one cell at a
    time per worker (xdist's --maxschedchunk 1, unless the user set it), so those long first calls
    spread over the workers while the warm-up pass runs, instead of landing in one worker's
    consecutive chunk or at the run's end. xdist still keeps two cells queued on each worker, so two
    long ones can meet in one queue (measured on the H200: docs/speed.md). The order is computed from
    data alone, so every worker collects the same order (xdist requires it)."""
    alone = compiling_alone(_selected_cells(config))
    config._attn_compiling_alone = alone
    items.sort(key=lambda item: _cell_id(item) not in alone)  # stable: the rest keep the matrix order


def pytest_collection_modifyitems(config, items):
    if platform.HAS_GPU and hasattr(config, "_attn_cells"):
        _compiling_alone_first(config, items)
    for item in items:
        cell = _item_cell(item)
        if cell is None:
            continue
        reason = skip_reason(cell)
        if reason:  # known from data: decided here, so the cell never reaches its test body
            item.add_marker(pytest.mark.skip(reason=reason))
        entry = match(config._attn_known, cell.record_keys())
        if entry is not None and entry.judgeable_here():
            item.user_properties.append(("known_failure", entry.id))
            item.add_marker(pytest.mark.xfail(reason=entry.xfail_reason, strict=True, raises=InsideSignature))


@pytest.fixture
def judge_failure(request):
    """Let the test say how its cell failed: the class goes to the result line, and a covering
    KNOWN_FAILURES.md entry raises its verdict (harness/ledger/known_failures.py KnownFailure.judge)."""
    cell = request.node.callspec.params["cell"]
    entry = match(request.config._attn_known, cell.record_keys())

    def judge(failure: Failure) -> None:
        request.node.user_properties.append(("failure_class", failure.failure_class))
        if entry is not None:
            entry.judge(failure)

    return judge


@pytest.fixture
def cell_metrics(request):
    """Let the test hand its comparison figures to the result line."""

    def record(result):
        worst = result.worst
        request.node.user_properties.append(("metrics", dict(
            max_abs_err=worst.max_abs_err, max_rel_err=worst.max_rel_err,
            mismatch_frac=worst.mismatch_frac, tolerance={"atol": worst.atol, "rtol": worst.rtol},
            phase_s=result.phase_s)))

    return record


def _identity(config, cell, nodeid: str) -> dict:
    """What names a cell in its records: its record keys, its node id and the command that reruns it."""
    return {**cell.record_keys(), "nodeid": nodeid, "rerun": rerun_command(nodeid, config._attn_cell_args)}


def _cell_of(config, nodeid: str):
    """The cell a test node runs, or None for a test that is not a cell."""
    cells = getattr(config, "_attn_cells_by_id", None)
    if cells is None:
        cells = config._attn_cells_by_id = {cell.cell_id: cell for cell in config._attn_cells}
    name, _, param = nodeid.partition("[")
    return cells.get(param.removesuffix("]")) if name.endswith("::test_cell") else None


def _cell_record(config, cell, status: str, reason: str | None, report, known_failure: str | None = None,
                 metrics: dict | None = None, failure_class: str | None = None) -> dict:
    """One result line (harness/reporting/cell_schema.py), from a worker or the controller."""
    record = cell_record(_identity(config, cell, report.nodeid), status, reason, wall_s=round(report.duration, 4),
                         known_failure=known_failure, measures=metrics)
    return {**record, "failure_class": failure_class}


def _status(report, known: str | None) -> str:
    if report.skipped and hasattr(report, "wasxfail"):
        return "xfailed"
    if report.skipped:
        return "skipped"
    if report.passed and hasattr(report, "wasxfail"):
        return "xpassed"
    if report.failed and known and str(report.longrepr).startswith("[XPASS(strict)]"):
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


def _patches_line(config) -> str | None:
    """The seed bug and fixes this run patched into sglang, as the header and each failure name them."""
    patches = [*([SEED_BUGS[config.getoption("--replay")]] if config.getoption("--replay") else []),
               *(FIXES[fix_id] for fix_id in requested_fixes(config.getoption("--apply-fix")))]
    return "; ".join(f"{'replaying seed bug' if patch.kind == REPLAY else 'with fix'} {patch.patch_id} "
                     f"({patch.upstream}: {patch.summary})" for patch in patches) or None


def _name_patches(report, config) -> None:
    """A failure in a run with a seed bug or fix patched in says so in its own message, not only in its
    rerun line: a reader of one failure must not mistake the planted bug for a new one."""
    crash = getattr(report.longrepr, "reprcrash", None)
    replay = config.getoption("--replay")
    if replay and crash is not None and not crash.message.startswith("[replay "):
        crash.message = f"[replay {replay}] {crash.message}"
    line = _patches_line(config)
    if line:
        report.sections.append(("patched sglang", line))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cell = _item_cell(item)
    if cell is None or not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    props = dict(item.user_properties)
    status = _status(report, props.get("known_failure"))
    poisoned = props.get("failure_class") == "crash"
    if status == "failed" and poisoned:
        status = "crashed"
    if report.failed:
        _name_patches(report, item.config)
    if status in ("failed", "crashed") and report.when == "call":
        report.sections.append(("rerun", rerun_command(report.nodeid, item.config._attn_cell_args)))
    append_record(_cell_record(item.config, cell, status, _reason(report), report, props.get("known_failure"),
                               props.get("metrics"), props.get("failure_class")),
                  worker=os.environ.get("PYTEST_XDIST_WORKER", "main"))
    if poisoned:
        # A sticky CUDA error poisons this process: leave, so xdist replaces the
        # worker and every other cell keeps running in a clean one.
        sys.stderr.write(f"\n[attn-harness] {cell.cell_id} crashed the device context; worker exits\n")
        sys.stderr.flush()
        os._exit(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    cell = _item_cell(item)
    if cell is None:
        yield
        return
    with watched(cell.cell_id, item.config.getoption("--cell-timeout")):
        yield


def _dead_worker(cell, longrepr) -> Failure:
    """What a worker that died on the cell said: the watchdog's timeout, or only that it died."""
    return timed_out(cell.cell_id) or of_dead_process(str(longrepr).splitlines()[0][:500])


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """Controller side: a worker died running a cell. Where a KNOWN_FAILURES.md entry of class crash
    covers the cell, that is its known failure: the report becomes an xfail, as in the test body."""
    config = _CONTROLLER.get("config")
    cell = config and _cell_of(config, crashitem)
    entry = cell and match(config._attn_known, cell.record_keys())
    if entry and entry.outside_signature(_dead_worker(cell, report.longrepr)) is None:
        report.outcome, report.wasxfail = "skipped", entry.xfail_reason


def pytest_runtest_logreport(report):
    """Controller side: a worker that died mid-cell (segfault) leaves no line; write it.

    A worker that recorded its own crash before leaving (a sticky CUDA error) said more than
    xdist can, so its line stands.
    """
    config = _CONTROLLER.get("config")
    if config is None or "crashed while running" not in str(report.longrepr or ""):
        return
    cell = _cell_of(config, report.nodeid)
    if cell is None or cell.cell_id in read_records(run_dir()):
        return
    failure = _dead_worker(cell, report.longrepr)
    entry = match(config._attn_known, cell.record_keys())
    status, reason = (("xfailed", report.wasxfail) if hasattr(report, "wasxfail") else
                      ("crashed", (entry and entry.outside_signature(failure)) or failure.message))
    append_record(_cell_record(config, cell, status, reason, report, entry and entry.id,
                               failure_class=failure.failure_class), worker="controller")


def _collected(config, nodeids) -> None:
    """Controller: the run's cells as collected (after -k, deselection and sharding), before any runs."""
    cells = [(nodeid, _cell_of(config, nodeid)) for nodeid in nodeids]
    config._attn_ledger.collected([_identity(config, cell, nodeid) for nodeid, cell in cells if cell])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    config = node.config
    if hasattr(config, "_attn_ledger"):
        config._attn_ledger.node_collected(node.gateway.id)
        _collected(config, ids)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    config = _CONTROLLER.get("config")
    if config is not None:
        config._attn_ledger.node_down(node.gateway.id, error)


def pytest_keyboard_interrupt(excinfo):
    config = _CONTROLLER.get("config")
    if config is not None:
        config._attn_ledger.stop_reason = str(excinfo.value) or excinfo.typename


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput") or not hasattr(config, "_attn_cells"):
        return
    for report in terminalreporter.stats.get("failed", []):
        terminalreporter.write_line(f"rerun: {rerun_command(report.nodeid, config._attn_cell_args)}")
    passed_over = getattr(config, "_attn_passed_over", {})  # harness/search/generated_plugin.py: draws a known failure covers
    if passed_over:
        terminalreporter.write_line("generated tier: passed over draws known to fail: " + ", ".join(
            f"{entry_id} ({count})" for entry_id, count in sorted(passed_over.items())))
    if partial_because([{"selection": _selection(config)}]) is None:  # staleness is judged on the whole matrix
        unjudged = runners_left_out_here(left_out_records(config._attn_left_out))
        unmet = [entry.id for entry in stale(config._attn_known, [c.record_keys() for c in config._attn_cells],
                                             unjudged_runners=unjudged,
                                             left_out_known=left_out_known(config._attn_known, config._attn_left_out_cells))
                 if entry.id not in passed_over]
        if unmet:
            terminalreporter.write_line(f"STALE known failures (the whole matrix has no cell they select): "
                                        f"{', '.join(unmet)}", yellow=True)
    records = getattr(config, "_attn_records", None)  # the cells the last line accounts for (pytest_sessionfinish)
    if records:
        left_out = left_out_line(config._attn_left_out)
        if left_out:
            terminalreporter.write_line(left_out)
        terminalreporter.write_sep("-", "attn-harness cells per backend")
        for line in per_backend_lines(records):
            terminalreporter.write_line(line)


def _after_the_run(config, records: list[dict], say) -> list[str]:
    """Crash attribution and sanitizer re-runs (their findings go to notes files); returns the run's one-line notes."""
    timeout, budget = config.getoption("--lone-timeout"), config.getoption("--confirm-crashes")
    crashed = [record for record in records if record["status"] == "crashed"]
    notes = confirm_crashes(crashed, config._attn_cell_args, budget, say, timeout) if budget else {}
    run_notes = [line for line in [attribution_summary(notes)] if line]
    if notes:
        write_notes("crash", notes)
    tools, statuses = config._attn_sanitize
    if tools:
        found, unavailable = sanitize(records, tools, config._attn_cell_args, config.getoption("--sanitize-max"),
                                      run_dir() / "sanitizer", say, timeout, statuses=statuses)
        if found:
            write_notes("sanitizer", found)
        run_notes += [unavailable] if unavailable else []
    return run_notes


def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput") or not hasattr(config, "_attn_cells"):
        return
    terminal = config.pluginmanager.getplugin("terminalreporter")
    say = terminal.write_line if terminal else print
    if hasattr(config, "_attn_warm_up_thread"):
        config._attn_warm_up_thread.join()
    if hasattr(config, "_attn_warm_up"):
        say(config._attn_warm_up.line())
    ledger = config._attn_ledger
    records = ledger.close(session)
    run_notes = []
    if session.exitstatus != pytest.ExitCode.INTERRUPTED:
        run_notes = _after_the_run(config, records, say)
    for line in run_notes:
        say(line)
    not_run = sum(record["status"] == "not_run" for record in records)
    if not_run and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    config._attn_records = records
    config._attn_last_line = totals_line(records, str(ledger.folder / NOT_RUN_LIST)) if records else None
    if not records:  # a session of the harness's own tests ran no cell: it leaves no run folder behind
        if config._attn_made_run_folder:
            shutil.rmtree(ledger.folder, ignore_errors=True)
        return
    info = {
        "run_id": run_id(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(config._attn_started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **platform.device_description(), "versions": platform.versions(),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "shard": "/".join(map(str, config._attn_shard)),
        "workers": getattr(config.option, "numprocesses", None) or 0,
        "replay": config.getoption("--replay"),
        "fix": config.getoption("--apply-fix"),
        "generated": getattr(config, "_attn_generated", None),  # harness/search/generated_plugin.py
        "selection": _selection(config),
        "left_out": left_out_records(config._attn_left_out),
        "left_out_known": left_out_known(config._attn_known, config._attn_left_out_cells),
        "wall_s": round(time.time() - config._attn_started, 2),
        "warm_up": config._attn_warm_up.as_report() if hasattr(config, "_attn_warm_up") else None,
        "collected": len(records), "not_run": not_run, "worker_crashes": ledger.worker_deaths,
        "notes": run_notes,
    }
    write_run_info(info)


def _selection(config) -> dict:
    return selection(config.option.keyword, config.option.markexpr, getattr(config.option, "deselect", None),
                     config.getoption("--cases-dir"), CASES_DIR, bool(config.getoption("--generated-only")),
                     config._attn_shard)


def pytest_unconfigure(config):
    """The run's last line accounts for every collected cell (after pytest's own summary)."""
    line = getattr(config, "_attn_last_line", None)
    terminal = config.pluginmanager.getplugin("terminalreporter")
    if line and terminal:
        terminal.write_line(line, red="NOT RUN" in line, bold=True)
