"""reports/SUMMARY.md: the human entry point to a night's results.

Ordered by what a reader needs: did it pass, and if not why at a glance (failures by verdict,
class and backend: a known sglang bug, a new failure, or one outside a known signature), where,
how to reproduce each failure, which cells never ran and why, why cells were skipped, and which
known-failure entries no longer earn their place.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Mapping, Sequence

from harness.ledger.known_failures import KnownFailure, stale
from harness.base.results import partial_because, runners_left_out_here
from harness.reporting.cell_schema import STATUSES, UNEXPECTED, diagnosis_lines, outcome_message
from harness.reporting.markdown import markdown_table, md_cell
from harness.reporting.matrix import build_grid, form_label, format_err, skipped_line, square_notes
from harness.reporting.runs import RunFacts, contracts_ran
from harness.reporting.verdicts import glance


def _status_section(cells: Sequence[Mapping]) -> list[str]:
    counts = Counter(cell["status"] for cell in cells)
    rows = [[status, str(counts[status])] for status in STATUSES if counts[status]]
    return ["## Status", "", *markdown_table(["status", "cells"], rows + [["total", str(len(cells))]])]


def _glance_section(cells: Sequence[Mapping]) -> list[str]:
    return ["## Red or green, and why", "", *glance(cells)]


def _matrix_section(cells: Sequence[Mapping]) -> list[str]:
    grid = build_grid(cells)
    rows = [[f"**{backend}**" if first else "", form_label(form),
             *(" · ".join(square_notes(grid.tally((backend, form), mode))) or "–" for mode in grid.modes)]
            for first, backend, form in grid.row_heads()]
    skipped = skipped_line(grid)
    return [
        "## Matrix",
        "",
        "A row per backend and runner form, a column per mode. passed/executed · worst max_abs_err of the cells "
        "no known failure covers · then counts of crash / fail / xpass (unexpectedly passed) / known (expected "
        "failure, with its own worst error: `2 known max 1.1e0`) / not run.",
        "",
        *(markdown_table(["backend", "runner form", *grid.modes], rows) if rows else ["No cell ran."]),
        *(["", skipped] if skipped else []),
    ]


def _tolerance(tolerance: Mapping | None) -> str:
    return ", ".join(f"{name} {value:g}" for name, value in tolerance.items()) if tolerance else "none"


def _problems_section(cells: Sequence[Mapping]) -> list[str]:
    problems = [cell for cell in cells if cell["status"] in UNEXPECTED]
    lines = ["## Failures, crashes, unexpected passes", ""]
    if not problems:
        return lines + ["None."]
    for cell in problems:
        lines.append(f"- **{cell['status']}** `{cell['cell_id']}`: {outcome_message(cell)}")
        if cell["max_abs_err"] is not None:
            lines.append(
                f"  - max_abs_err {format_err(cell['max_abs_err'])}, max_rel_err {format_err(cell['max_rel_err'])}, "
                f"mismatch_frac {format_err(cell['mismatch_frac'])}, tolerance {_tolerance(cell['tolerance'])}"
            )
        lines += [f"  - {md_cell(line)}" for line in diagnosis_lines(cell)]
        lines.append(f"  - rerun: `{cell['rerun']}`")
    return lines


def _by_reason(cells: Sequence[Mapping], status: str) -> dict[str, list[Mapping]]:
    """Cells of one status grouped by reason, largest group first."""
    groups: dict[str, list[Mapping]] = defaultdict(list)
    for cell in cells:
        if cell["status"] == status:
            groups[cell["reason"] or "no reason given"].append(cell)
    return dict(sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])))


def _not_run_section(cells: Sequence[Mapping]) -> list[str]:
    lines = ["## Not run, by reason", ""]
    groups = _by_reason(cells, "not_run")
    if not groups:
        return lines + ["None: every collected cell ran."]
    for reason, group in groups.items():
        lines.append(f"- **{md_cell(reason)}** ({len(group)} cells): "
                     + ", ".join(f"`{cell['cell_id']}`" for cell in group))
    return lines


def _skips_section(cells: Sequence[Mapping]) -> list[str]:
    by_reason = _by_reason(cells, "skipped")
    lines = ["## Skipped, by reason", ""]
    if not by_reason:
        return lines + ["None."]
    rows = [
        [
            md_cell(reason),
            str(len(group)),
            ", ".join(sorted({cell["backend"] for cell in group})),
            ", ".join(sorted({cell["mode"] for cell in group})),
        ]
        for reason, group in by_reason.items()
    ]
    return lines + markdown_table(["reason", "cells", "backends", "modes"], rows)


def _left_out_section(runs: Sequence[Mapping]) -> list[str]:
    """The cells no machine runs, which the runs did not collect (run.json ``left_out``), by reason."""
    by_why: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for run in runs:
        for group in run.get("left_out") or []:
            by_why[(group["kind"], group["why"])][group["backend"]] += group["cells"]
    lines = ["## Left out: cells no machine runs here, not collected", ""]
    if not any("left_out" in run for run in runs):
        return lines + ["Not recorded: these runs predate the count (they collected every cell)."]
    if not by_why:
        return lines + ["None."]
    rows = [[md_cell(kind), md_cell(why), str(sum(backends.values())), ", ".join(sorted(backends))]
            for (kind, why), backends in sorted(by_why.items(), key=lambda item: -sum(item[1].values()))]
    return lines + markdown_table(["kind", "reason", "cells", "backends"], rows)


def stale_section(cells: Sequence[Mapping], known_failures: Sequence[KnownFailure],
                  runs: Sequence[Mapping] = ()) -> list[str]:
    """Entries the whole matrix has no cell for, among those of the release the runs used; a run of a part
    of the matrix judges none (harness/base/results.py partial_because), and the entries the generated tier
    passed draws over for (run.json ``generated.passed_over``) are named apart: their cells were drawn
    and known, not run."""
    lines = ["## Stale KNOWN_FAILURES entries", ""]
    partial = partial_because(list(runs))
    if partial:
        return lines + [f"Not judged: a stale entry is one the whole matrix has no cell for, and this report's "
                        f"{partial}."]
    release = contracts_ran(runs, "results.json")
    passed_over = Counter()
    for run in runs:
        passed_over.update((run.get("generated") or {}).get("passed_over") or {})
    unjudged = runners_left_out_here(group for run in runs for group in run.get("left_out") or [])
    present = {entry_id for run in runs for entry_id in run.get("left_out_known") or []}
    entries = [entry for entry in stale(known_failures, cells, release, unjudged, present)
               if entry.id not in passed_over]
    if passed_over:
        lines += ["Not stale: the generated tier passed over draws they cover (known to fail, not run): "
                  + ", ".join(f"{entry_id} ({count})" for entry_id, count in sorted(passed_over.items())) + ".", ""]
    if not entries:
        return lines + ["None."]
    return lines + [f"- {entry.id} ({entry.upstream}, {entry.source}): it selects no cell of the matrix: fixed and "
                    "removed, renamed, or a typo in its selectors" for entry in entries]


def render_summary(results: Mapping, known_failures: Sequence[KnownFailure]) -> str:
    cells = results["cells"]
    notes = [f"- {md_cell(note)}" for run in results["runs"] for note in run.get("notes") or []]
    sections = [
        ["# attn-harness results", "", RunFacts.of(results["runs"]).line(), *([""] + notes if notes else [])],
        _status_section(cells),
        _glance_section(cells),
        _matrix_section(cells),
        _problems_section(cells),
        _not_run_section(cells),
        _skips_section(cells),
        _left_out_section(results["runs"]),
        stale_section(cells, known_failures, results["runs"]),
    ]
    return "\n\n".join("\n".join(section) for section in sections) + "\n"
