"""The cell matrix: every (case, backend, runner form, padding) a run covers, with readable ids, the
batches each cell runs (a graph cell replays its one graph on two) and the one-line command that
reruns each."""

from __future__ import annotations

import shlex
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from _pytest.mark.expression import Expression

from harness import ROOT
from harness.families import BACKENDS
from harness.base.case_spec import Case, CaseSpec
from harness.case.case_traits import traits_of
from harness.case.cases import CASES_DIR
from harness.modes import MODES
from harness.fixtures.pools import DRAW_PLACES
from harness.ledger.known_failures import KNOWN_FAILURES_FILE
from harness.base.results import LEFT_OUT_HERE
from harness.runners import GRAPH_RUNNER_NAMES, RUNNER_FORMS


@dataclass(frozen=True)
class Cell:
    case: Case
    backend: str
    runner: str
    capture_bs: int | None = None  # graph forms only
    padding: str | None = None  # prod_fill | small_real; None when nothing is padded

    @property
    def cell_id(self) -> str:
        graph = f"-cbs{self.capture_bs}-{self.padding or 'nopad'}" if self.runner in GRAPH_RUNNER_NAMES else ""
        return f"{self.case.case_id}-{self.backend}-{self.runner}{graph}"

    def record_keys(self) -> dict:
        """The fields reports group by (see harness/reporting)."""
        return dict(cell_id=self.cell_id, case=self.case.spec.name, backend=self.backend,
                    mode=self.case.mode, draft_shape=self.case.spec.draft_shape,
                    host_mirrors=self.case.spec.host_mirrors, runner=self.runner,
                    padding=self.padding, capture_bs=self.capture_bs, traits=list(traits_of(self.case)))


def skip_reason(cell: Cell) -> str | None:
    """Why this machine cannot run the cell, known from data alone, or None.

    The runner form's rules (graph support, which machine a form needs), the backend entry's
    (platform, installed kernels, dtypes, draft window, declared limits) and the mode's worker's
    (a backend or form the algorithm never runs) need nothing built, so collection attaches the
    reason as a skip mark and such a cell costs nothing when the run reaches it. What only a
    built backend can answer (sglang's host-mirror decision) stays in run_cell.
    """
    return combination_skip_reason(cell.case.mode, cell.backend, cell.runner, cell.case.spec)


def combination_skip_reason(mode: str, backend: str, runner: str, spec: CaseSpec) -> str | None:
    """skip_reason for a (mode, backend, runner form, case) before any cell exists (the generator's draws)."""
    entry, form = BACKENDS[backend], RUNNER_FORMS[runner]
    return (form.skip_reason(entry) or entry.skip_reason(mode, spec) or (form.graph and entry.graph_refusal(mode))
            or MODES[mode].worker_skip_reason(entry.server_arg, RUNNER_FORMS[runner].graph, spec))


LEFT_OUT_KINDS = {  # what leaves a cell out of collection, in the order asked; each asks (form, entry, mode, cell)
    "a runner form the backend lacks": lambda form, entry, mode, cell: form.refusal(entry),
    LEFT_OUT_HERE: lambda form, entry, mode, cell: form.unneeded_here(),
    "the backend's own limits": lambda form, entry, mode, cell: (entry.refusal(cell.case.mode, cell.case.spec)
                                                                 or (form.graph and entry.graph_refusal(cell.case.mode))),
    "a pairing the mode's worker never runs": lambda form, entry, mode, cell: mode.worker_skip_reason(
        entry.server_arg, form.graph, cell.case.spec),
}


def left_out(cell: Cell) -> tuple[str, str] | None:
    """(kind, why) when the cell is not collected at all, else None: no machine runs it under the
    installed release (the runner form refuses the backend, the backend the case, or the mode's
    worker the backend in that form), or this machine leaves its form out (the CPU stand-in on a GPU).
    A report full of cells that can never run hides the ones that did; a cell that needs what only
    another machine has (a GPU) stays collected, skipped with its reason."""
    form, entry, mode = RUNNER_FORMS[cell.runner], BACKENDS[cell.backend], MODES[cell.case.mode]
    return next(((kind, why) for kind, check in LEFT_OUT_KINDS.items() if (why := check(form, entry, mode, cell))),
                None)


def collectable(cells: list[Cell]) -> tuple[list[Cell], Counter]:
    """The cells to collect, and how many were left out for each (kind, why, backend, runner)."""
    kept, dropped = [], Counter()
    for cell in cells:
        reason = left_out(cell)
        if reason:
            dropped[(*reason, cell.backend, cell.runner)] += 1
        else:
            kept.append(cell)
    return kept, dropped


def left_out_line(dropped: Counter) -> str | None:
    """One line for a run's left-out cells, by kind with the backends concerned (run.json has each reason)."""
    if not dropped:
        return None
    counts, backends = Counter(), {}
    for (kind, _, backend, _), count in dropped.items():
        counts[kind] += count
        backends.setdefault(kind, set()).add(backend)
    return (f"left out {sum(counts.values())} cells no machine runs here, not collected (run.json left_out says "
            "why): " + "; ".join(f"{count} {kind} ({', '.join(sorted(backends[kind]))})"
                                  for kind, count in counts.most_common()))


def _graph_cells(case: Case, backend: str, runner: str) -> list[Cell]:
    spec = case.spec
    cells = []
    for capture_bs in spec.capture_sizes:
        styles = spec.pad_styles if capture_bs > spec.bs else [None]
        cells += [Cell(case, backend, runner, capture_bs, style) for style in styles]
    return cells


def expand_cells(cases: list[Case]) -> list[Cell]:
    cells = []
    for case in cases:
        for backend in case.spec.backends:
            for runner in case.spec.runners:
                cells += (_graph_cells(case, backend, runner) if runner in GRAPH_RUNNER_NAMES
                          else [Cell(case, backend, runner)])
    return cells


# --- the batches a cell runs -----------------------------------------------------------------

SMALL_REAL_PREFIXES = (1, 2, 3)


@dataclass(frozen=True)
class ReplayBatch:
    spec: CaseSpec  # the batch as run: small_real fillers included
    real_bs: int  # the requests compared: the first real_bs of spec
    extra: bool  # False: the cell's own batch

    def label(self, number: int, after: "ReplayBatch | None") -> str:
        """How comparisons name this replay, e.g. 'replay 2 (extra bs 1 after bs 3)'."""
        what = f"{'extra ' if self.extra else ''}bs {self.real_bs}"
        return f"replay {number} ({what}{f' after bs {after.real_bs}' if after else ''})"


def with_small_real_requests(spec: CaseSpec, capture_bs: int) -> CaseSpec:
    """small_real padding: fill the captured batch with short genuine requests."""
    extra = capture_bs - spec.bs
    prefixes = [SMALL_REAL_PREFIXES[i % len(SMALL_REAL_PREFIXES)] for i in range(extra)]
    update = dict(prefix_lens=[*spec.prefix_lens, *prefixes])
    if spec.input_lens is not None:
        update["input_lens"] = [spec.window] * capture_bs
    return spec.model_copy(update=update)


def _padded(spec: CaseSpec, cell: Cell, extra: bool) -> ReplayBatch:
    run = with_small_real_requests(spec, cell.capture_bs) if cell.padding == "small_real" else spec
    return ReplayBatch(run, spec.bs, extra)


def extra_batch_spec(spec: CaseSpec, bs: int) -> CaseSpec:
    """``bs`` requests with other prefix lengths than the case's (see replay_batches)."""
    prefixes, longest = spec.prefix_lens, max(spec.prefix_lens)
    shifted = [min(longest, max(1, prefixes[(i + 1) % spec.bs] - (i + 1))) for i in range(bs)]
    update = dict(prefix_lens=shifted, seed=spec.seed + 1)
    if spec.input_lens is not None:
        update["input_lens"] = [spec.window] * bs
    return spec.model_copy(update=update)


def cell_batch(cell: Cell) -> ReplayBatch:
    """The cell's own batch, padded as the cell pads."""
    return _padded(cell.case.spec, cell, extra=False)


def replay_batches(cell: Cell) -> list[ReplayBatch]:
    """A graph cell's batches in replay order, the cell's own among them, derived from its case.

    Production captures a graph once and replays it thousands of times on batches of every size up
    to the capture size; state one replay leaves in the static buffers (a row the next batch no
    longer fills, an indptr the metadata init does not rewrite) is a bug class a single replay
    cannot show. So a graph cell replays its graph on two batches, each compared with the
    reference: the cell's own batch, and one extra batch with other lengths, ordered so that a
    smaller batch follows a larger one wherever the capture size allows:

    - capture size > bs: first an extra batch of bs + 1 requests, then the cell's batch;
    - capture size == bs > 1: the cell's batch, then an extra batch of bs - 1 requests;
    - capture size == bs == 1: the cell's batch, then an extra batch of 1 request.

    Extra request i's prefix is the cell's prefix of request (i + 1) mod bs, shortened by i + 1
    tokens (at least 1, at most the cell's longest), so row lengths differ from the cell's batch at
    the same rows; its draft trees are drawn with seed + 1. The window and every other field are
    the case's. The extra batch is padded to the capture size as the cell pads (small_real: short
    genuine requests; otherwise as the runners pad, prod_fill). The same cell always gets the same
    batches. The requests of both batches live in one set of pools, so the graph, the backend and
    the pools are built once and serve both.
    """
    spec, capture_bs = cell.case.spec, cell.capture_bs
    own = cell_batch(cell)
    if capture_bs > spec.bs:
        return [_padded(extra_batch_spec(spec, spec.bs + 1), cell, extra=True), own]
    return [own, _padded(extra_batch_spec(spec, max(spec.bs - 1, 1)), cell, extra=True)]


def keyword_selected(cell: Cell, expression: str) -> bool:
    """Whether ``-k`` keeps the cell: the names pytest matches for its item (harness/, test_cases.py,
    test_cell[<cell id>]), case-insensitive substrings, as pytest's own KeywordMatcher does."""
    if not expression:
        return True
    names = ("harness", "test_cases.py", f"test_cell[{cell.cell_id}]".lower())
    return Expression.compile(expression).evaluate(lambda part: any(part.lower() in name for name in names))


def in_shard(cell: Cell, shard: tuple[int, int]) -> bool:
    """--shard i/n keeps the cells whose id hashes to i-1 (mod n).

    A stable hash of the id, not the position: the cell list is ordered by
    case and backend, so round-robin would send whole backends to one shard,
    and adding a case would reshuffle every shard.
    """
    number, total = shard
    return zlib.crc32(cell.cell_id.encode()) % total == number - 1


def repo_path(value: str) -> str:
    """A path as a command run from the repository root needs it: relative inside the repo, else absolute."""
    path = Path(value).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# Options of the first run that change what a cell is or what its outcome means, so a rerun must
# repeat them: option -> (its default, how to write a value for a command run from the repository root).
# A generated cell exists only when drawn again (harness/search/generated_plugin.py), unless written out as a case file.
DRAWING_OPTIONS = {"--generated": ("0", str), "--generated-seed": ("0", str), "--generated-profile": (None, str)}
CELL_DEFINING_OPTIONS = {"--cases-dir": (repo_path(str(CASES_DIR)), repo_path), "--replay": (None, str),
                         "--apply-fix": (None, str),
                         "--known-failures": (repo_path(str(KNOWN_FAILURES_FILE)), repo_path), **DRAWING_OPTIONS,
                         "--draws": (DRAW_PLACES[0], str)}  # the random values (pools.draw_generator)


PATCH_OPTIONS = ("--replay", "--apply-fix")  # what harness/bugs/seed_bugs.py patches into sglang for a run


def patch_args(getoption) -> list[str]:
    """The run's patch options as arguments, for the processes that run its cells outside pytest
    (harness/search/cell_worker.py: the warm-up pass and the shrinker)."""
    return [part for option in PATCH_OPTIONS if getoption(option) for part in (option, getoption(option))]


def cell_defining_args(getoption) -> list[str]:
    """The first run's options that a rerun of one of its cells needs (non-default ones only)."""
    args = []
    for option, (default, spell) in CELL_DEFINING_OPTIONS.items():
        value = getoption(option)
        if value is not None and spell(value) != default:
            args += [option, spell(value)]
    return args


def rerun_command(nodeid: str, args: list[str]) -> str:
    """The one-line command a user runs to reproduce one cell."""
    return shlex.join(["pytest", nodeid, *args])


def case_file_rerun(cell_id: str, args: list[str], cases_dir: Path) -> str:
    """The rerun of a cell written out as a one-case file in ``cases_dir``.

    ``args`` are the first run's cell-defining options (cell_defining_args); the drawing options
    and its --cases-dir give way to the folder, so no hypothesis draw is needed and the command
    reproduces the cell on any machine where its backend runs, not only on the kind that drew it.
    """
    given = dict(zip(args[::2], args[1::2]))  # every cell-defining option takes a value
    kept = [part for option, value in given.items() if option not in {*DRAWING_OPTIONS, "--cases-dir"}
            for part in (option, value)]
    return rerun_command(f"harness/test_cases.py::test_cell[{cell_id}]", [*kept, "--cases-dir", repo_path(str(cases_dir))])
