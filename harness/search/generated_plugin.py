"""pytest wiring of the generated tier: --generated N adds N drawn cells to the run.

The cells join the hand-made ones (or replace them, --generated-only) after
harness/session/pytest_plugin.py has collected those. The controller counts what the
generated cells did and the time they took, and writes each failing or crashed
one, as soon as it is reported, as a one-case file in the run folder's
generated-cases/ with a rerun line that needs no hypothesis draw: a drawn case
may come out differently on another kind of machine (the draw profile and
sglang's capture sizes differ), a case file does not, so the failure can be
looked at wherever its backend runs. The rerun line also becomes the cell's
record's (a notes file, harness/base/results.py). The controller then shrinks
failing cells to reproducer case files in the same folder, prints all of it,
and leaves it on config._attn_generated for the run record (run.json).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from harness.base import platform
from harness.case.case_limits import CELL_MEMORY_ENV, cell_memory_budget
from harness.case.cases import fields_of
from harness.cell.cell_matrix import case_file_rerun, collectable, expand_cells, in_shard, patch_args, repo_path
from harness.search.draw_caps import PROFILES
from harness.search.generated import Generated, distinct_draws, draw_processes, draws_as_json, draws_from_json, tier_of
from harness.base.results import run_dir, write_notes
from harness.cell.run_cell import import_sglang
from harness.search.shrink import CellExecutor, Shrunk, shrink, write_case

OUTCOMES = ("passed", "failed", "crashed", "skipped", "xfailed", "xpassed")
CASES_FOLDER = "generated-cases"  # in the run folder: failing generated cells and their shrunk reproducers


def pytest_addoption(parser):
    group = parser.getgroup("attn-harness generated tier")
    group.addoption("--generated", type=int, default=0, metavar="N", help="add N generated cells (0: none)")
    group.addoption("--generated-seed", type=int, default=0, help="seed of the generated cells")
    group.addoption("--generated-profile", choices=sorted(PROFILES), default=None,
                    help="what the draws may be and cost (harness/search/draw_caps.py); default: this machine's")
    group.addoption("--generated-only", action="store_true", help="run the generated cells alone, no hand-made ones")
    group.addoption("--generated-budget", type=float, default=0, metavar="SECONDS",
                    help="skip generated cells that would start after this many seconds (0: no limit)")
    group.addoption("--shrink-max", type=int, default=1,
                    help="shrink at most this many failing generated cells, one per failure class")
    group.addoption("--shrink-budget", type=float, default=300, metavar="SECONDS", help="time for each shrink")


@dataclass
class GeneratedRun:
    """The generated tier of one pytest run, as the controller saw it."""

    profile: str
    seed: int
    requested: int
    draw_s: float
    by_cell: dict[str, Generated]
    budget_s: float
    controller: bool  # False in an xdist worker: it only runs cells (and honours the budget)
    cell_args: list[str]  # the options that draw these cells again, for rerun lines (harness/cell/cell_matrix.py)
    outcomes: dict[str, str] = field(default_factory=dict)  # cell id -> outcome
    cell_s: float = 0.0
    failures: list[str] = field(default_factory=list)  # failed or crashed cell ids, in report order
    case_files: dict[str, dict] = field(default_factory=dict)  # failing cell id -> {case_file, rerun}
    reproducers: list[Shrunk] = field(default_factory=list)
    not_shrunk: list[str] = field(default_factory=list)
    passed_over: dict[str, int] = field(default_factory=dict)  # entry id -> draws passed over as known to fail

    def cell_id(self, report) -> str | None:
        cell_id = report.nodeid.rpartition("[")[2].rstrip("]")
        return cell_id if cell_id in self.by_cell else None

    def pytest_runtest_setup(self, item):
        started = item.config._attn_started
        if self.budget_s and self.cell_id(item) and time.time() - started > self.budget_s:
            pytest.skip(f"generated-tier budget of {self.budget_s:g} s spent")

    def pytest_runtest_logreport(self, report):
        cell_id = self.cell_id(report)
        if cell_id is None or not self.controller:
            return
        self.cell_s += report.duration
        if report.when == "call" or not report.passed:
            outcome = ("xfailed" if hasattr(report, "wasxfail") and report.skipped else
                       "xpassed" if hasattr(report, "wasxfail") else
                       "crashed" if "crashed while running" in str(report.longrepr or "") else report.outcome)
            self.outcomes[cell_id] = outcome
            if outcome in ("failed", "crashed") and cell_id not in self.failures:
                self.failures.append(cell_id)
                self.write_case_file(cell_id, outcome)

    def write_case_file(self, cell_id: str, outcome: str) -> None:
        """The failing cell as a one-case file the strict loader takes, and its rerun line in its record."""
        generated, folder = self.by_cell[cell_id], run_dir() / CASES_FOLDER
        path = folder / f"{cell_id}.yaml"
        rerun = case_file_rerun(cell_id, self.cell_args, folder)
        write_case(path, generated.case.mode, fields_of(generated.case.spec), [
            f"Cell {cell_id}, {generated.case.source}: {outcome} in run {run_dir().name}.",
            f"Rerun (no hypothesis draw: on any machine where {generated.case.spec.backends[0]} runs): {rerun}",
            "Copy this file into cases/ to keep the case.",
        ])
        self.case_files[cell_id] = dict(case_file=repo_path(str(path)), rerun=rerun)
        write_notes("generated", {cell: dict(rerun=found["rerun"]) for cell, found in self.case_files.items()})

    @pytest.hookimpl(tryfirst=True)  # before harness/session/pytest_plugin.py writes run.json
    def pytest_sessionfinish(self, session):
        config = session.config
        if not self.controller:
            return
        out_dir = run_dir() / CASES_FOLDER
        patches = patch_args(config.getoption)
        executor = CellExecutor(patches, timeout_s=config.getoption("--shrink-budget"))
        classes: set[str] = set()
        try:
            for cell_id in self.failures:
                if len(self.reproducers) >= config.getoption("--shrink-max"):
                    break
                generated = self.by_cell[cell_id]
                first = executor.run(generated.draw.drawn)
                if first["failure"] is None:
                    self.not_shrunk.append(f"{cell_id}: did not fail when rerun alone ({first['status']})")
                elif first["failure"] not in classes:
                    classes.add(first["failure"])
                    shrunk = shrink(generated, first, PROFILES[self.profile], self.seed, patches, out_dir,
                                    config.getoption("--shrink-budget"), executor)
                    (self.not_shrunk if isinstance(shrunk, str) else self.reproducers).append(shrunk)
        finally:
            executor.close()
        config._attn_generated = self.as_report()

    def as_report(self) -> dict:
        counts = {name: sum(o == name for o in self.outcomes.values()) for name in OUTCOMES}
        return dict(profile=self.profile, seed=self.seed, requested=self.requested, drawn=len(self.by_cell),
                    draw_s=round(self.draw_s, 2), cell_s=round(self.cell_s, 1), **counts,
                    failures=[dict(cell=cell_id, **self.case_files[cell_id]) for cell_id in self.failures],
                    reproducers=[r.as_report() for r in self.reproducers], not_shrunk=self.not_shrunk,
                    passed_over=self.passed_over)

    def pytest_terminal_summary(self, terminalreporter):
        if not self.controller:
            return
        report = self.as_report()
        counts = ", ".join(f"{report[name]} {name}" for name in OUTCOMES if report[name])
        terminalreporter.write_line(
            f"generated tier ({self.profile} profile, seed {self.seed}): {report['drawn']} cells drawn in "
            f"{report['draw_s']} s; {counts or 'none run'}; {report['cell_s']} s in generated cells")
        for cell_id in self.failures:
            terminalreporter.write_line(f"generated {cell_id} as a case file: {self.case_files[cell_id]['case_file']}")
            terminalreporter.write_line(f"  rerun: {self.case_files[cell_id]['rerun']}")
        for shrunk in self.reproducers:
            terminalreporter.write_line(f"reproducer {repo_path(str(shrunk.case_file))} "
                                        f"({shrunk.runs} runs, {shrunk.wall_s:.0f} s): {shrunk.failure}", red=True)
            terminalreporter.write_line(f"  rerun: {shrunk.rerun}")
        for reason in self.not_shrunk:
            terminalreporter.write_line(f"not shrunk: {reason}", yellow=True)


DRAWS_FILE = "generated-draws.json"  # in the run folder: the controller's draws, which its workers read
DRAWS_WAIT_S = 0.05  # how often a worker looks for them


def pytest_configure(config):
    """A controller removes a draws file an earlier run left in its run folder (one reused through
    ATTN_HARNESS_RUN_ID) before any worker starts: a worker would read it as this run's draws. Every
    process of a generated run takes its profile's memory budget (take_profile_budget)."""
    if not _asked(config):
        return
    take_profile_budget(PROFILES[_profile(config)].max_pool_bytes.limit)
    if not hasattr(config, "workerinput"):
        (run_dir() / DRAWS_FILE).unlink(missing_ok=True)


def take_profile_budget(profile_bytes: int) -> None:
    """A profile whose cells may be larger than the case loader's default per-cell budget (the scale
    tier's) carries its own: the run sets CELL_MEMORY_ENV to it, in whole GiB, unless the user set one,
    which stands. Without it the loader refused every draw between the two budgets and the profile's
    stated cap never bound (the first scale run needed both settings given in step)."""
    if CELL_MEMORY_ENV not in os.environ and profile_bytes > cell_memory_budget():
        os.environ[CELL_MEMORY_ENV] = str(-(-profile_bytes >> 30))


def _asked(config) -> bool:
    return bool(config.getoption("--generated") or config.getoption("--generated-only"))


def _requested(config) -> bool:
    return hasattr(config, "_attn_cells") and _asked(config)


def _profile(config) -> str:
    return config.getoption("--generated-profile") or ("gpu" if platform.HAS_GPU else "cpu")


def _draws(config) -> tuple[str, float]:
    """The run's draws as text and the seconds they took: drawn once, by the controller (or a run
    without workers), and written to the run folder (DRAWS_FILE); an xdist worker waits for that
    file and draws nothing. The controller draws after pytest-xdist has started its workers, so the
    draws take place while the workers import sglang, not before they start. The controller uses
    the text too, so both sides build their cells from the same values."""
    if hasattr(config, "workerinput"):
        if platform.HAS_GPU:  # its cells will need sglang (harness/session/pytest_plugin.py): imported while the controller draws
            import_sglang()
        return _wait_for(run_dir() / DRAWS_FILE), 0.0
    if not hasattr(config, "_attn_draws"):
        started = time.time()
        config._attn_passed_over = Counter()
        draws = distinct_draws(PROFILES[_profile(config)], config.getoption("--generated-seed"),
                               config.getoption("--generated"), known=config._attn_known,
                               passed_over=config._attn_passed_over, processes=draw_processes())
        text = draws_as_json(draws)
        written = run_dir() / f".{DRAWS_FILE}.partial"
        written.write_text(text)
        written.replace(run_dir() / DRAWS_FILE)  # whole or absent: a worker never reads half of it
        config._attn_draws = (text, time.time() - started)
    return config._attn_draws


def _wait_for(path) -> str:
    """The text of a file another process writes whole (the controller's draws); a controller that
    fails before writing it ends the session, and pytest-xdist stops the waiting workers with it."""
    while not path.exists():
        time.sleep(DRAWS_WAIT_S)
    return path.read_text()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """Add the drawn cells to the collected ones; after hypothesis's plugin has finished initialising.

    (harness/session/pytest_plugin.py collected the hand-made cells in pytest_configure. pytest-xdist's
    controller starts its workers in its own sessionstart, which runs before this one: the draws
    follow, alongside the workers' imports.)
    """
    config = session.config
    if not _requested(config):
        return
    profile, seed, count = _profile(config), config.getoption("--generated-seed"), config.getoption("--generated")
    text, draw_s = _draws(config)
    tier = tier_of(PROFILES[profile], seed, draws_from_json(text))
    cells, left_out = collectable([cell for cell in expand_cells([g.case for g in tier])
                                   if in_shard(cell, config._attn_shard)])
    by_case = {g.case.case_id: g for g in tier}
    hand_made = not config.getoption("--generated-only")
    config._attn_cells = (config._attn_cells if hand_made else []) + cells
    config._attn_left_out = (config._attn_left_out if hand_made else Counter()) + left_out
    run = GeneratedRun(profile, seed, count, draw_s, {cell.cell_id: by_case[cell.case.case_id] for cell in cells},
                       config.getoption("--generated-budget"), controller=not hasattr(config, "workerinput"),
                       cell_args=config._attn_cell_args, passed_over=dict(getattr(config, "_attn_passed_over", {})))
    config.pluginmanager.register(run, "attn-harness-generated-run")
