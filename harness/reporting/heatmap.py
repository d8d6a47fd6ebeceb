"""out/<section>/matrix.png (recorded in reports/<section>/): SUMMARY.md's grid at a glance, a row
per backend and runner form, a column per mode, readable at its natural size (no row or column of
skips only; they are named under the legend).

Colour answers "did what ran pass": green when all of it did, amber to yellow by pass rate when
known failures remain, red wherever anything failed, crashed or passed unexpectedly (one broken
cell must not hide in a 99% square), violet where cells never ran and nothing else went wrong,
grey where everything was skipped. Each square also prints its counts
and worst error, so the picture does not depend on telling colours apart.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Mapping

from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure  # not pyplot: no global backend or figure state to manage
from matplotlib.patches import Patch, Rectangle

from harness.reporting.matrix import Tally, build_grid, form_label, skipped_line, square_notes
from harness.reporting.runs import RunFacts

# Fill colours, all light enough for black text. A square where everything that ran passed is
# green; one with expected (known) failures runs from amber (nothing passed) to yellow.
ALL_PASSED_COLOR = "#8fd19e"
PARTIAL_PASS_COLORS = LinearSegmentedColormap.from_list("partial_pass", ["#f2a65a", "#f2e07a"])
UNEXPECTED_COLOR = "#ef8a80"
NOT_RUN_COLOR = "#c9b3e6"
SKIPPED_COLOR = "#d9d9d9"
ABSENT_COLOR = "white"


def _fill(tally: Tally | None) -> str:
    if tally is None:
        return ABSENT_COLOR
    if tally.unexpected:
        return UNEXPECTED_COLOR
    if tally.not_run:
        return NOT_RUN_COLOR
    if not tally.executed:
        return SKIPPED_COLOR
    rate = tally.passed / tally.executed
    return ALL_PASSED_COLOR if rate == 1 else PARTIAL_PASS_COLORS(rate)


SQUARE_IN = (1.25, 0.62)  # inches a square takes, wide and high: four lines of 8-point text at 100 dpi
DPI = 100


def draw_heatmap(results: Mapping, path: Path) -> None:
    grid = build_grid(results["cells"])
    facts = RunFacts.of(results["runs"])
    rows, cols = max(1, len(grid.rows)), max(1, len(grid.modes))
    fig = Figure(figsize=(max(7.0, SQUARE_IN[0] * cols + 2.4), max(3.0, SQUARE_IN[1] * rows + 2.6)))
    ax = fig.subplots()
    for y, row in enumerate(grid.rows):
        for x, mode in enumerate(grid.modes):
            tally = grid.tally(row, mode)
            ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor=_fill(tally), edgecolor="white", linewidth=2))
            ax.text(x, y, "\n".join(square_notes(tally)), ha="center", va="center", fontsize=8, linespacing=1.15)
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xticks(range(len(grid.modes)), [mode.replace("_", "_\n", 1) for mode in grid.modes], fontsize=8)
    ax.set_yticks(range(len(grid.rows)), [f"{backend}  {form_label(form)}" for backend, form in grid.rows],
                  fontsize=8)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    width_chars = int(12 * cols + 20)
    subtitle = textwrap.fill(facts.versions, width=width_chars)
    title = f"attn-harness · {facts.device} · driver {facts.driver} · {facts.date}"
    ax.set_title(f"{title}\n{subtitle}", fontsize=9, pad=10)
    ax.legend(
        handles=[
            Patch(color=ALL_PASSED_COLOR, label="all executed cells passed"),
            Patch(color=PARTIAL_PASS_COLORS(0.5), label="known failures (amber = fewer passed)"),
            Patch(color=UNEXPECTED_COLOR, label="crash / fail / xpass (unexpected pass)"),
            Patch(color=NOT_RUN_COLOR, label="cells not run (see SUMMARY.md)"),
            Patch(color=SKIPPED_COLOR, label="only skipped"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.01),
        ncol=2,
        fontsize=8,
        frameon=False,
        title=textwrap.fill(skipped_line(grid) or "", width=width_chars) or None,
        title_fontsize=7,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
