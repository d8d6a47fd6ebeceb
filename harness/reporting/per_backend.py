"""The end of a run in the terminal, per backend: how many cells ran, passed, failed, were
skipped, and the main reasons for the skips.

pytest's own line counts tests, and a matrix of 2,000 cells is mostly skips that are decided by
the machine (no GPU, no capture), so "121 passed, 2019 skipped" does not say which backend was
exercised. One row per backend and the skip reasons counted ("212 cells: fa3 needs a CUDA GPU")
do. The rows are the same records the run's last line counts (harness/reporting/totals.py), so
the `all` row adds up to it.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from harness.reporting.cell_schema import STATUSES
from harness.reporting.matrix import Tally, shortened

ALWAYS_SHOWN = ("passed", "failed", "skipped")  # other statuses get a column only when a cell has them
TOP_SKIP_REASONS = 3
REASON_CHARS = 110


def _tallies(cells: Iterable[Mapping]) -> dict[str, Tally]:
    """One Tally per backend, backends in name order."""
    found: dict[str, Tally] = {}
    for cell in cells:
        found.setdefault(cell["backend"], Tally()).add(cell)
    return dict(sorted(found.items()))


def _skip_lines(tally: Tally) -> list[str]:
    """The most common skip reasons, with how many cells each one skipped."""
    reasons = tally.skip_reasons.most_common()
    shown = reasons if len(reasons) <= TOP_SKIP_REASONS + 1 else reasons[:TOP_SKIP_REASONS]  # never "1 other reason"
    lines = [f"  {_cells(count)} skipped: {shortened(reason, REASON_CHARS)}" for reason, count in shown]
    rest = reasons[len(shown):]
    if rest:
        lines.append(f"  {_cells(sum(count for _, count in rest))} skipped for {len(rest)} other reasons")
    return lines


def _cells(count: int) -> str:
    return f"{count} cell" + "s" * (count != 1)


def per_backend_lines(cells: list[Mapping]) -> list[str]:
    """A table: backend, cells, ran, then a column per status; skip reasons under each row; an `all` row."""
    by_backend = _tallies(cells)
    everything = Tally()
    for cell in cells:
        everything.add(cell)
    statuses = [status for status in STATUSES if status in ALWAYS_SHOWN or everything.statuses[status]]
    header = ["backend", "cells", "ran", *statuses]
    rows = [[name, str(sum(tally.statuses.values())), str(tally.executed),
             *(str(tally.statuses[status]) for status in statuses)]
            for name, tally in [*by_backend.items(), ("all", everything)]]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join([row[0].ljust(widths[0]), *(value.rjust(width) for value, width in zip(row[1:], widths[1:]))])

    lines = [line(header)]
    for row, tally in zip(rows, [*by_backend.values(), None]):
        lines.append(line(row))
        lines += _skip_lines(tally) if tally is not None else []
    return lines
