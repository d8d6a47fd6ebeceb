"""The support matrix on docs/results.md, regenerated from results.json instead of edited by hand.

A hand-kept capability table goes stale; this one is rewritten between
`<!-- matrix:<section>:start -->` / `<!-- matrix:<section>:end -->` markers from the recorded
reports/<section>/results.json.gz (`python -m harness record` does it), and CI runs it with
`--check` so a page that no longer matches the recorded results fails the build. The page is
the one place the matrix lives; the README links to it.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Mapping

from harness import ROOT
from harness.reporting.cell_schema import ReportingError
from harness.reporting.markdown import markdown_table, md_cell
from harness.reporting.matrix import Tally, build_grid, form_label, shortened, skipped_line
from harness.reporting.runs import RunFacts

SECTIONS = ("gpu", "gpu-mla", "cpu")  # gpu-mla: the MLA rows run apart on a GPU (reports/gpu-mla)
MATRIX_PAGE = ROOT / "docs" / "results.md"  # the page that holds every section's matrix
SKIP_REASON_CHARS = 40  # a matrix square stays narrow; SUMMARY.md has the full reasons


def markers(section: str) -> tuple[str, str]:
    return f"<!-- matrix:{section}:start -->", f"<!-- matrix:{section}:end -->"


def _square(tally: Tally | None) -> str:
    if tally is None:
        return "–"
    if not tally.executed and not tally.not_run:
        return f"skip: {md_cell(shortened(tally.main_skip_reason, SKIP_REASON_CHARS))}"
    text = f"{tally.passed}/{tally.executed}"
    if tally.unexpected:
        text += " ❌"
    if tally.not_run:
        text += f" ⚠ {tally.not_run} not run"
    if tally.known_failures:
        text += " known: " + ", ".join(sorted(tally.known_failures))
    return text


def render_block(results: Mapping, section: str) -> str:
    """The Markdown that goes between the section's markers (markers excluded): SUMMARY.md's grid, a
    row per backend and runner form and a column per mode, without the rows and columns of skips only."""
    grid = build_grid(results["cells"])
    rows = [[backend if first else "", form_label(form), *(_square(grid.tally((backend, form), mode))
                                                             for mode in grid.modes)]
            for first, backend, form in grid.row_heads()]
    skipped = skipped_line(grid)
    return "\n".join([
        f"<!-- generated from reports/{section}/results.json.gz by `python -m harness record --section {section}`; "
        "do not edit by hand -->",
        f"_{RunFacts.of(results['runs']).line()}_",
        "",
        *markdown_table(["backend", "runner form", *grid.modes], rows),
        *(["", skipped] if skipped else []),
    ])


def replace_block(readme: str, section: str, block: str, readme_name: str) -> str:
    """Return the page's text with the section's block replaced; the markers must exist once each."""
    start, end = markers(section)
    for marker in (start, end):
        count = readme.count(marker)
        if count != 1:
            problem = "no" if count == 0 else f"{count} copies of the"
            raise ReportingError(
                f"{readme_name} has {problem} {marker} marker; it needs exactly one pair, {start} and "
                f"{end}, each on its own line where the {section.upper()} matrix should appear"
            )
    head, rest = readme.split(start)
    if end not in rest:
        raise ReportingError(f"{readme_name}: {end} comes before {start}; swap them")
    _, tail = rest.split(end)
    return f"{head}{start}\n{block}\n{end}{tail}"


def page_with_matrix(page: Path, results: Mapping, section: str) -> tuple[str, str]:
    """The page's text as it is, and as it should be with the section's matrix from `results`."""
    current = page.read_text(encoding="utf-8")
    return current, replace_block(current, section, render_block(results, section), str(page))


def readme_diff(current: str, expected: str, readme_name: str) -> str:
    """Unified diff from the committed page to the one the results produce ('' when equal)."""
    return "".join(difflib.unified_diff(
        current.splitlines(keepends=True),
        expected.splitlines(keepends=True),
        fromfile=f"{readme_name} (committed)",
        tofile=f"{readme_name} (from results)",
    ))
