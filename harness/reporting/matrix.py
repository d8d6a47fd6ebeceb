"""The grid SUMMARY.md, matrix.png and the docs matrix all draw, so they can never disagree about a
count: a row per backend and runner form, a column per mode, rows and columns where every cell was
skipped left out and named.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from harness.reporting.cell_schema import EXECUTED, MODE_ORDER, PADDINGS, RUNNERS, UNEXPECTED

Form = tuple  # (runner,) or (runner, padding): a row of the grid under its backend
KNOWN = ("xfailed", "xpassed")  # the statuses a known failure gives


def _worse(current: float | None, err: float) -> float:
    """The larger error, NaN counting as the largest (max() keeps whichever NaN-pair came first)."""
    if current is None:
        return err
    return math.nan if math.isnan(current) or math.isnan(err) else max(current, err)


@dataclass
class Tally:
    """Outcomes of the cells that fall in one matrix square."""

    statuses: Counter = field(default_factory=Counter)
    skip_reasons: Counter = field(default_factory=Counter)
    known_failures: set = field(default_factory=set)
    worst_abs_err: float | None = None  # of the cells no known failure covers: what is new shows here
    known_worst_abs_err: float | None = None  # of the cells a known failure covers (xfailed, xpassed)

    def add(self, cell: Mapping) -> None:
        status = cell["status"]
        self.statuses[status] += 1
        if status == "skipped":
            self.skip_reasons[cell["reason"] or "no reason given"] += 1
        known = status in KNOWN
        if known:
            self.known_failures.add(cell["known_failure"])
        if cell["max_abs_err"] is not None and status in EXECUTED:
            if known:
                self.known_worst_abs_err = _worse(self.known_worst_abs_err, cell["max_abs_err"])
            else:
                self.worst_abs_err = _worse(self.worst_abs_err, cell["max_abs_err"])

    @property
    def executed(self) -> int:
        return sum(self.statuses[status] for status in EXECUTED)

    @property
    def passed(self) -> int:
        return self.statuses["passed"]

    @property
    def unexpected(self) -> int:
        return sum(self.statuses[status] for status in UNEXPECTED)

    @property
    def not_run(self) -> int:
        return self.statuses["not_run"]

    @property
    def only_skipped(self) -> bool:
        return not self.executed and not self.not_run

    @property
    def main_skip_reason(self) -> str | None:
        return self.skip_reasons.most_common(1)[0][0] if self.skip_reasons else None


def shortened(text: str, chars: int) -> str:
    """`text` cut to at most `chars` characters, an ellipsis marking the cut (reasons in narrow places)."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _rank(value: str | None, order: tuple) -> tuple:
    """Declared values first in declared order, then anything else alphabetically."""
    return (order.index(value), "") if value in order else (len(order), value or "")


def _form_rank(form: Form) -> tuple:
    return (_rank(form[0], RUNNERS), _rank(form[1] if len(form) > 1 else None, (None,) + PADDINGS))


def form_of(cell: Mapping) -> Form:
    return (cell["runner"],) if cell["padding"] is None else (cell["runner"], cell["padding"])


def form_label(form: Form) -> str:
    return " ".join(form)


@dataclass(frozen=True)
class Grid:
    """SUMMARY.md's and matrix.png's matrix: a row per (backend, runner form), a column per mode.
    A row or column where every cell was skipped says nothing a reader can act on and hides the rest:
    it is left out and named in ``skipped_rows`` / ``skipped_modes`` (SUMMARY.md gives the reasons)."""

    rows: list[tuple[str, Form]]
    modes: list[str]
    tallies: dict[tuple[tuple[str, Form], str], Tally]
    skipped_rows: list[tuple[str, Form]]
    skipped_modes: list[str]

    def tally(self, row: tuple[str, Form], mode: str) -> Tally | None:
        return self.tallies.get((row, mode))

    def row_heads(self) -> list[tuple[bool, str, Form]]:
        """(whether the row is its backend's first, backend, form) per row: tables name a backend once."""
        return [(i == 0 or backend != self.rows[i - 1][0], backend, form)
                for i, (backend, form) in enumerate(self.rows)]


def build_grid(cells: Iterable[Mapping]) -> Grid:
    tallies: dict[tuple[tuple[str, Form], str], Tally] = {}
    for cell in cells:
        tallies.setdefault(((cell["backend"], form_of(cell)), cell["mode"]), Tally()).add(cell)
    rows = sorted({row for row, _ in tallies}, key=lambda row: (row[0], _form_rank(row[1])))
    modes = sorted({mode for _, mode in tallies}, key=lambda mode: _rank(mode, MODE_ORDER))
    telling_rows = {row for (row, _), tally in tallies.items() if not tally.only_skipped}
    telling_modes = {mode for (_, mode), tally in tallies.items() if not tally.only_skipped}
    return Grid(rows=[row for row in rows if row in telling_rows],
                modes=[mode for mode in modes if mode in telling_modes],
                tallies=tallies,
                skipped_rows=[row for row in rows if row not in telling_rows],
                skipped_modes=[mode for mode in modes if mode not in telling_modes])


def skipped_line(grid: Grid) -> str | None:
    """One line naming what the grid left out because every cell there was skipped, or None."""
    by_backend: dict[str, list[str]] = {}
    for backend, form in grid.skipped_rows:
        by_backend.setdefault(backend, []).append(form_label(form))
    parts = [f"{backend} ({', '.join(forms)})" for backend, forms in by_backend.items()]
    if grid.skipped_modes:
        parts.append("modes " + ", ".join(grid.skipped_modes))
    if not parts:
        return None
    return "Not drawn, every cell skipped (SUMMARY.md gives the reasons under Skipped, by reason): " + "; ".join(parts)


def format_err(value: float | None) -> str:
    """Short error for a crowded square: 1.2e-7, 0.25 as 2.5e-1, 0, nan; – when nothing was measured."""
    if value is None:
        return "–"
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


# How a square counts the cells that did not simply pass or skip, worst first.
OUTCOME_WORDS = {"crashed": "crash", "failed": "fail", "xpassed": "xpass", "xfailed": "known", "not_run": "not run"}


def square_notes(tally: Tally | None) -> list[str]:
    """What a matrix square says, shared by SUMMARY.md and matrix.png: passed/executed, the worst
    error of the cells no known failure covers, then the outcomes that were not a plain pass (cells
    that never ran included), the known failures' counts with their own worst error ("2 known max
    1.1e0"), apart, so a known bug's error never passes for a new one; "skip" where every cell was skipped, nothing where no cell exists.
    """
    if tally is None:
        return []
    if tally.only_skipped:
        return ["skip"]
    notes = [f"{tally.passed}/{tally.executed}", format_err(tally.worst_abs_err)]
    known_err = "" if tally.known_worst_abs_err is None else f" max {format_err(tally.known_worst_abs_err)}"
    return notes + [f"{tally.statuses[status]} {word}{known_err if status in KNOWN else ''}"
                    for status, word in OUTCOME_WORDS.items() if tally.statuses[status]]
