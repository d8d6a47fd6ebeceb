"""COVERAGE.md: for each backend x mode, the pairs of axis values it can have and how many cells cover.

Computed from the case matrix and the entries' rules (harness/search/pair_coverage.py), not from a run,
so it says what the matrix holds: a pair counts as covered by a cell this machine skips (a GPU
cell on CPU), and the table says how many pairs only such cells cover.
"""

from __future__ import annotations

from harness.base import platform
from harness.search.pair_coverage import AXES, Coverage, show_pair
from harness.reporting.markdown import markdown_table
from harness.base.releases import installed
from harness.base.results import SECTION


def _pairs(pairs: list) -> str:
    return ", ".join(f"`{show_pair(pair)}`" for pair in pairs)


def render_coverage(table: list[Coverage]) -> str:
    release = installed()
    rows = [[entry.backend, entry.mode, *map(str, (len(entry.possible), len(entry.covered), len(entry.uncovered),
                                                   len(entry.skipped_here_only), len(entry.runnable_here_unrun)))]
            for entry in table]
    possible, covered = sum(len(e.possible) for e in table), sum(len(e.covered) for e in table)
    lines = [
        "# Pair coverage",
        "",
        f"_{SECTION} ({platform.DEVICE}) · sglang {release.version} (contracts of {release.contracts}) · "
        "`python -m harness.reporting coverage`; do not edit by hand_",
        "",
        "A pair is two values of two axes (" + ", ".join(f"{axis.name}: {' / '.join(axis.values)}" for axis in AXES)
        + "). *possible*: some cell with both could run on some machine (the mode takes the case, the backend "
        "entry and the runner form do not refuse it, sglang's scheduler can take its host-mirror path); "
        "*covered*: a cell of cases/*.yaml has both, wherever it runs; *only skipped here*: every covering cell "
        f"is one this machine ({SECTION}) skips; *runnable here, not run*: of those, pairs a cell this machine "
        "runs could have. Host-mirror variants of a backend that keeps the mirrors (sglang asks the built "
        "backend) count as possible and skip at run time.",
        "",
        f"{covered} of {possible} possible pairs covered over {len(table)} backend x mode squares.",
        "",
        *markdown_table(["backend", "mode", "pairs possible", "covered", "uncovered", "only skipped here",
                         "runnable here, not run"], rows),
    ]
    uncovered = [entry for entry in table if entry.uncovered]
    if uncovered:
        lines += ["", "## Uncovered pairs", ""]
        lines += [f"- {entry.backend} x {entry.mode}: {_pairs(entry.uncovered)}" for entry in uncovered]
    partial = [entry for entry in table if 0 < len(entry.skipped_here_only) < len(entry.covered)]
    if partial:
        lines += ["", f"## Pairs covered only by cells {SECTION} skips", "",
                  "Where this machine runs some of a square's cells (elsewhere it runs none, or all):", ""]
        lines += [f"- {entry.backend} x {entry.mode}: {_pairs(entry.skipped_here_only)}" for entry in partial]
    return "\n".join(lines) + "\n"
