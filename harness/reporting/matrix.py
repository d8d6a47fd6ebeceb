"""The backend x (mode, runner[, padding]) aggregation that SUMMARY.md, matrix.png and the
docs matrix all draw, so the three can never disagree about a count.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from harness.reporting.cell_schema import EXECUTED, MODE_ORDER, PADDINGS, RUNNERS, UNEXPECTED

Column = tuple  # (mode, runner) or (mode, runner, padding)


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
    worst_abs_err: float | None = None

    def add(self, cell: Mapping) -> None:
        status = cell["status"]
        self.statuses[status] += 1
        if status == "skipped":
            self.skip_reasons[cell["reason"] or "no reason given"] += 1
        if status in ("xfailed", "xpassed"):
            self.known_failures.add(cell["known_failure"])
        if cell["max_abs_err"] is not None and status in EXECUTED:
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
    def main_skip_reason(self) -> str | None:
        return self.skip_reasons.most_common(1)[0][0] if self.skip_reasons else None


def shortened(text: str, chars: int) -> str:
    """`text` cut to at most `chars` characters, an ellipsis marking the cut (reasons in narrow places)."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def column_of(cell: Mapping, with_padding: bool) -> Column:
    if with_padding and cell["padding"] is not None:
        return (cell["mode"], cell["runner"], cell["padding"])
    return (cell["mode"], cell["runner"])


def _rank(value: str | None, order: tuple) -> tuple:
    """Declared values first in declared order, then anything else alphabetically."""
    return (order.index(value), "") if value in order else (len(order), value or "")


def _column_rank(column: Column) -> tuple:
    padding = column[2] if len(column) > 2 else None
    return (_rank(column[0], MODE_ORDER), _rank(column[1], RUNNERS), _rank(padding, (None,) + PADDINGS))


def column_label(column: Column, sep: str = "/") -> str:
    return sep.join(column)


@dataclass(frozen=True)
class Matrix:
    backends: list[str]
    columns: list[Column]
    tallies: dict[tuple[str, Column], Tally]

    def tally(self, backend: str, column: Column) -> Tally | None:
        return self.tallies.get((backend, column))


def build_matrix(cells: Iterable[Mapping], with_padding: bool = False) -> Matrix:
    tallies: dict[tuple[str, Column], Tally] = {}
    for cell in cells:
        key = (cell["backend"], column_of(cell, with_padding))
        tallies.setdefault(key, Tally()).add(cell)
    return Matrix(
        backends=sorted({backend for backend, _ in tallies}),
        columns=sorted({column for _, column in tallies}, key=_column_rank),
        tallies=tallies,
    )


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
    """What a matrix square says, shared by SUMMARY.md and matrix.png: passed/executed, worst
    error, then the outcomes that were not a plain pass (cells that never ran included); "skip"
    where every cell was skipped, nothing where no cell exists.
    """
    if tally is None:
        return []
    if not tally.executed and not tally.not_run:
        return ["skip"]
    notes = [f"{tally.passed}/{tally.executed}", format_err(tally.worst_abs_err)]
    counts = [(tally.statuses[status], word) for status, word in OUTCOME_WORDS.items()]
    return notes + [f"{count} {word}" for count, word in counts if count]
