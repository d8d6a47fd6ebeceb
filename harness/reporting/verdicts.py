"""Why a board is red, at a glance: failing cells grouped by verdict, failure class and backend.

A red board is only useful if a reader can tell at once whether the red is a known sglang bug
still there, a new failure, or a known bug failing another way than its KNOWN_FAILURES.md
signature (a second bug hiding in the same cells). SUMMARY.md and the nightly digest both show
this grouping, from the records' status, known_failure and failure_class.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping

from harness.ledger.failure_class import FAILURE_CLASSES
from harness.reporting.markdown import markdown_table

# verdict -> what it means; in the order a reader acts on them. All but the last make a run red.
VERDICTS = {
    "new failure": "no KNOWN_FAILURES.md entry covers these cells",
    "outside a known signature": "an entry covers these cells, but they fail another way than its signature says",
    "unexpected pass": "an entry covers these cells and they pass: the bug is fixed, drop the entry",
    "not run": "collected but never executed (see the reasons under Not run)",
    "known sglang bug": "they fail inside their KNOWN_FAILURES.md signature (expected failures)",
}
GREEN = "known sglang bug"
UNCLASSIFIED = "unclassified"  # a failure without a class: before the test body, or a record older than classes
# What the class column says where there is no failure to classify.
NO_FAILURE = {"xpassed": "passes", "not_run": "never ran"}


def verdict(cell: Mapping) -> str | None:
    """The cell's verdict, or None for a cell that passed or was skipped."""
    status = cell["status"]
    if status in ("failed", "crashed"):
        return "outside a known signature" if cell.get("known_failure") else "new failure"
    return {"xpassed": "unexpected pass", "not_run": "not run", "xfailed": GREEN}.get(status)


def failure_class(cell: Mapping) -> str:
    return NO_FAILURE.get(cell["status"]) or cell.get("failure_class") or UNCLASSIFIED


@dataclass(frozen=True)
class Group:
    verdict: str
    failure_class: str
    backend: str
    cells: tuple[Mapping, ...]

    @property
    def entries(self) -> list[str]:
        return sorted({cell["known_failure"] for cell in self.cells if cell.get("known_failure")})


_CLASS_ORDER = (*FAILURE_CLASSES, UNCLASSIFIED, *NO_FAILURE.values())


def groups(cells: Iterable[Mapping]) -> list[Group]:
    """Cells with a verdict, grouped; by verdict (VERDICTS order), class (registry order), backend."""
    found: dict[tuple[str, str, str], list[Mapping]] = defaultdict(list)
    for cell in cells:
        if verdict(cell):
            found[verdict(cell), failure_class(cell), cell["backend"]].append(cell)
    order = sorted(found, key=lambda key: (list(VERDICTS).index(key[0]), _CLASS_ORDER.index(key[1]), key[2]))
    return [Group(*key, tuple(found[key])) for key in order]


def glance(cells: Iterable[Mapping]) -> list[str]:
    """One line saying red or green and why, then the groups as a table (nothing more when none)."""
    found = groups(cells)
    counts = defaultdict(int)
    for group in found:
        counts[group.verdict] += len(group.cells)
    said = {name: f"{name}: {counts[name]} cell{'s' * (counts[name] != 1)}" for name in VERDICTS if counts[name]}
    red = [text for name, text in said.items() if name != GREEN]
    known = said.get(GREEN, f"no {GREEN}")
    line = (f"**Red**: {', '.join(red)}; {known}." if red else
            f"**Green**: no failure outside KNOWN_FAILURES.md signatures; {known}.")
    if not found:
        return [line]
    rows = [[f"**{group.verdict}**" if group.verdict != GREEN else group.verdict, group.failure_class,
             group.backend, str(len(group.cells)), ", ".join(group.entries) or "–", f"`{group.cells[0]['cell_id']}`"]
            for group in found]
    legend = [f"- {name}: {meaning}" for name, meaning in VERDICTS.items() if counts[name]]
    return [line, "", *markdown_table(["verdict", "failure class", "backend", "cells", "KNOWN_FAILURES entries",
                                       "first cell"], rows), "", *legend]
