"""The one line that accounts for every collected cell, printed last by each command that runs or
merges cells, so that cells which never ran cannot go unnoticed at the bottom of a long log.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

from harness.reporting.cell_schema import STATUSES

NAMED_INLINE = 3  # not-run cells named on the line itself; the rest are in the file it points to


def status_counts(cells: Iterable[Mapping]) -> str:
    """'150 passed, 5 crashed, 162 not_run', in schema order."""
    counts = Counter(cell["status"] for cell in cells)
    return ", ".join(f"{counts[status]} {status}" for status in STATUSES if counts[status])


def totals_line(cells: list[Mapping], listed_in: str) -> str:
    """The last line of a run: all cells accounted for, or how many did not run, which, and why."""
    not_run = [cell for cell in cells if cell["status"] == "not_run"]
    if not not_run:
        return f"attn-harness: all {len(cells)} collected cells accounted for: {status_counts(cells)}"
    reasons = Counter(cell["reason"] for cell in not_run).most_common()
    why = reasons[0][0] + (f" (and {len(reasons) - 1} other reasons)" if len(reasons) > 1 else "")
    names = ", ".join(cell["cell_id"] for cell in not_run[:NAMED_INLINE])
    more = f" and {len(not_run) - NAMED_INLINE} more" if len(not_run) > NAMED_INLINE else ""
    return (f"attn-harness: {len(not_run)} of {len(cells)} collected cells NOT RUN ({why}): "
            f"{names}{more}; all listed in {listed_in} [{status_counts(cells)}]")
