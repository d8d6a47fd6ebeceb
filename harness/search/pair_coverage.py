"""Every pair of axis values meets: for each backend x mode, the pairs it can have and the cells that have them.

An axis is one way cells differ; AXES says, for each, the values it takes, how to read a cell's
value and what a case sets to give it a value. For one backend and mode, a pair of values of two
axes is *possible* when some cell with both could run on some machine: the mode takes the case
(its own validation and the loader's limits), the backend entry and the runner form do not
refuse it (``refusal``: dtypes, limits, graph support; what only this machine lacks, a GPU or a
package, does not count), and sglang's scheduler can take its host-mirror path in that mode
(asked: decide_needs_cpu_seq_lens keeps the mirrors for NGRAM whatever the backend). Whether a
pair is possible is found by probing: each case of the mode, with the pair's two values set, must
make such a cell. A pair is *covered* when a cell of the matrix has both values and is refused
nowhere, whether or not this machine runs it; the cells this machine skips (cell_matrix.skip_reason)
are counted apart.

harness/search/test_pair_coverage.py fails naming every possible pair no cell covers;
``python -m harness.search.pair_cover`` proposes case variants that cover them, to paste into
cases/*.yaml (the cells stay data); ``python -m harness.reporting coverage`` writes the table.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Iterable, get_args

from pydantic import ValidationError

from harness.families import BACKENDS, FAMILIES, family_of_backend
from harness.base.case_spec import Case, CaseSpec, Dtype, HostMirrors, KvLayout, PadStyle
from harness.case.cases import fields_of, spec_from_fields, spec_problem
from harness.cell.cell_matrix import Cell, expand_cells, skip_reason
from harness.modes import MODES
from harness.runners import GRAPH_RUNNER_NAMES, RUNNER_FORMS, RUNNER_NAMES

NOPAD = "nopad"  # a graph cell whose capture size is its batch: nothing padded
PAGE_SIZE = 16  # the page a probe (and a suggested case) uses for page_size > 1
DRAFT_WINDOW, DRAFT_SINK = 8, 4  # what a probe sets for the draft window values


@dataclass(frozen=True)
class Axis:
    """One way cells differ: its values, a cell's value (None where it does not apply) and what
    a case or cell sets for a value (CaseSpec fields, or ``runner`` / ``padding`` of the cell)."""

    name: str
    values: tuple[str, ...]
    of: Callable[[Cell], str | None]
    sets: Callable[[str], dict]


def _window(cell: Cell) -> str | None:
    spec = cell.case.spec
    if not MODES[cell.case.mode].takes_draft_window:
        return None
    return "off" if not spec.draft_window else "window+sink" if spec.draft_sink else "window"


WINDOW_FIELDS = {"off": dict(draft_window=0, draft_sink=0), "window": dict(draft_window=DRAFT_WINDOW, draft_sink=0),
                 "window+sink": dict(draft_window=DRAFT_WINDOW, draft_sink=DRAFT_SINK)}

AXES: tuple[Axis, ...] = (
    Axis("host_mirrors", get_args(HostMirrors), lambda c: c.case.spec.host_mirrors, lambda v: dict(host_mirrors=v)),
    Axis("page_size", ("1", ">1"), lambda c: "1" if c.case.spec.page_size == 1 else ">1",
         lambda v: dict(page_size=1 if v == "1" else PAGE_SIZE)),
    Axis("topk", ("1", ">1"), lambda c: "1" if c.case.spec.topk == 1 else ">1",
         lambda v: dict(topk=1 if v == "1" else 2)),
    Axis("draft_window", tuple(WINDOW_FIELDS), _window, lambda v: dict(WINDOW_FIELDS[v])),
    Axis("runner", RUNNER_NAMES, lambda c: c.runner, lambda v: dict(runner=v)),
    Axis("padding", (NOPAD, *get_args(PadStyle)),
         lambda c: (c.padding or NOPAD) if c.runner in GRAPH_RUNNER_NAMES else None, lambda v: dict(padding=v)),
    Axis("kv_layout", get_args(KvLayout), lambda c: c.case.spec.kv_layout, lambda v: dict(kv_layout=v)),
    Axis("dtype", get_args(Dtype), lambda c: c.case.spec.dtype, lambda v: dict(dtype=v)),
)
AXIS = {axis.name: axis for axis in AXES}
CELL_FIELDS = ("runner", "padding")  # what a probe sets on the cell, not on its case

Value = tuple[str, str]  # (axis, value)
Pair = tuple[Value, Value]  # in AXES order


def show_pair(pair: Pair) -> str:
    return " x ".join(f"{axis}={value}" for axis, value in pair)


def values_of(cell: Cell) -> list[Value]:
    return [(axis.name, value) for axis in AXES if (value := axis.of(cell)) is not None]


def pairs_of(cell: Cell) -> set[Pair]:
    return set(itertools.combinations(values_of(cell), 2))


SELECTION_FIELDS = {"name", "backends", "runners", "pad_styles", "capture_bs"}  # lists a cell is picked from


def cell_key(cell: Cell) -> tuple:
    """What makes two cells the same work, whatever their names and the lists they were picked from."""
    spec = json.dumps(cell.case.spec.model_dump(exclude=SELECTION_FIELDS), sort_keys=True)
    return cell.case.mode, spec, cell.backend, cell.runner, cell.capture_bs, cell.padding


def all_pairs() -> list[Pair]:
    """Every pair of values of two different axes, in AXES order."""
    return [((a.name, x), (b.name, y)) for a, b in itertools.combinations(AXES, 2) for x in a.values for y in b.values]


# --- what can run somewhere ------------------------------------------------------------------

class Prober:
    """Whether cells can run on some machine, with what it asked remembered (one matrix's worth)."""

    def __init__(self):
        self._mirrors: dict[str, bool] = {}
        self._specs: dict[tuple, CaseSpec | None] = {}

    def scheduler_may_drop_mirrors(self, mode: str, spec: CaseSpec) -> bool:
        """Whether sglang's scheduler drops the host mirrors in this mode for a backend that does not
        need them: decide_needs_cpu_seq_lens, asked inside the mode's server args (as run_cell asks
        it for a built backend), with a stand-in backend that opts out."""
        if mode not in self._mirrors:
            from harness.fixtures.sglang_env import scheduler_keeps_host_mirrors, server_fields, sglang_state

            opted_out = SimpleNamespace(needs_cpu_seq_lens=False)
            with sglang_state(server_fields(spec, "triton", MODES[mode].speculative_args(spec))) as server_args:
                self._mirrors[mode] = not scheduler_keeps_host_mirrors(server_args, [opted_out, None])
        return self._mirrors[mode]

    def refusal(self, cell: Cell) -> str | None:
        """Why no machine runs the cell (skip_reason without what only this machine lacks), or None."""
        entry, spec = BACKENDS[cell.backend], cell.case.spec
        reason = RUNNER_FORMS[cell.runner].refusal(entry) or entry.refusal(cell.case.mode, spec)
        if reason is None and spec.host_mirrors != "full" and not self.scheduler_may_drop_mirrors(cell.case.mode, spec):
            reason = f"sglang's scheduler keeps the host mirrors in {cell.case.mode} whatever the backend"
        return reason

    def spec(self, mode: str, base: CaseSpec, fields: dict) -> CaseSpec | None:
        """``base`` with ``fields`` set, when the mode takes it (None otherwise)."""
        key = (mode, id(base), tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in fields.items())))
        if key not in self._specs:
            try:
                spec = spec_from_fields({**fields_of(base), **fields})
            except ValidationError:
                spec = None
            self._specs[key] = None if spec is None or spec_problem(mode, spec) else spec
        return self._specs[key]

    def cells(self, mode: str, base: CaseSpec, backend: str, values: Iterable[Value]) -> Iterable[Cell]:
        """Cells of ``base`` with ``values`` set: every runner form and padding the values leave open."""
        sets = {}
        for axis_name, value in values:
            sets.update(AXIS[axis_name].sets(value))
        cell_sets = {name: sets.pop(name) for name in CELL_FIELDS if name in sets}
        spec = self.spec(mode, base, sets)
        if spec is None:
            return
        case = Case(mode, spec, "probe")
        for runner in [cell_sets["runner"]] if "runner" in cell_sets else RUNNER_NAMES:
            if runner not in GRAPH_RUNNER_NAMES:
                yield Cell(case, backend, runner)
                continue
            padding = cell_sets.get("padding", NOPAD)
            yield Cell(case, backend, runner, spec.bs if padding == NOPAD else 2 * spec.bs,
                       None if padding == NOPAD else padding)

    def possible(self, mode: str, backend: str, pair: Pair, bases: list[CaseSpec], here: bool = False) -> bool:
        """Some case of the mode, with the pair set, makes a cell with both values that some machine
        (``here``: this machine) runs."""
        return any(pair in pairs_of(cell) and self.refusal(cell) is None and not (here and skip_reason(cell))
                   for base in bases for cell in self.cells(mode, base, backend, pair))


# --- the table -------------------------------------------------------------------------------

@dataclass
class Coverage:
    """One backend x mode: its possible pairs, and the cells of the matrix that cover them."""

    backend: str
    mode: str
    possible: set[Pair] = field(default_factory=set)
    covered: set[Pair] = field(default_factory=set)  # by a cell some machine runs
    covered_here: set[Pair] = field(default_factory=set)  # by a cell this machine runs
    possible_here: set[Pair] = field(default_factory=set)  # by a cell this machine would run

    @property
    def uncovered(self) -> list[Pair]:
        return sorted(self.possible - self.covered, key=_pair_rank)

    @property
    def skipped_here_only(self) -> list[Pair]:
        """Covered pairs whose every covering cell this machine skips."""
        return sorted(self.covered - self.covered_here, key=_pair_rank)

    @property
    def runnable_here_unrun(self) -> list[Pair]:
        """Pairs a cell this machine runs could have, covered only by cells it skips."""
        return sorted(self.possible_here - self.covered_here, key=_pair_rank)


def _pair_rank(pair: Pair) -> tuple:
    order = {(axis.name, value): (i, j) for i, axis in enumerate(AXES) for j, value in enumerate(axis.values)}
    return tuple(order[value] for value in pair)


def coverage(cases: list[Case], prober: Prober | None = None) -> list[Coverage]:
    """Per backend x mode (in registry order): possible pairs, and those the cells of ``cases`` cover."""
    prober = prober or Prober()
    # a backend's possible pairs are drawn from the cases of its own family (an MLA backend never runs a dense case)
    bases = {(family, mode): [case.spec for case in cases if case.mode == mode and case.spec.family == family]
             for family in FAMILIES for mode in MODES}
    table = {(backend, mode): Coverage(backend, mode) for backend in BACKENDS for mode in MODES}
    for cell in expand_cells(cases):
        if prober.refusal(cell) is None:
            entry = table[(cell.backend, cell.case.mode)]
            pairs = pairs_of(cell)
            entry.covered |= pairs
            if skip_reason(cell) is None:
                entry.covered_here |= pairs
    candidates = all_pairs()
    for (backend, mode), entry in table.items():
        mine = bases[(family_of_backend(backend), mode)]
        entry.possible = entry.covered | {pair for pair in candidates if pair not in entry.covered
                                          and prober.possible(mode, backend, pair, mine)}
        entry.possible_here = entry.covered_here | {
            pair for pair in entry.possible - entry.covered_here
            if prober.possible(mode, backend, pair, mine, here=True)}
    return [entry for entry in table.values() if entry.possible]


def uncovered_lines(table: list[Coverage]) -> list[str]:
    """One line per possible pair no cell covers, naming the backend and the mode."""
    return [f"{entry.backend} x {entry.mode}: {show_pair(pair)}" for entry in table for pair in entry.uncovered]
