"""Adding a speculative algorithm is its mode module(s) plus YAML: a new MODES entry, and nothing
else, reaches every consumer.

A child process registers a copy of the DFlash draft mode under a new name before anything reads
the registry (as a new module listed in harness/modes/__init__.py would), then follows a case of
that mode from YAML to the report: the case schema accepts it, the cell matrix expands it with the
same skip rules as the original (backend limits keyed on its forward mode, the worker's own),
the generator's runnability rule takes it, one of its cells runs end to end on this machine with
the original's result, a result line validates against the report schema, the matrix shows its
column and a KNOWN_FAILURES.md entry matches its cells. A second list of mode names anywhere on
that path would refuse the name and fail this test. (harness/fixtures/test_add_a_backend.py holds the
same claim for backends.)
"""

from __future__ import annotations

import textwrap

from harness.fixtures.test_add_a_backend import run_in_child

CHILD = textwrap.dedent("""
    import copy, sys
    from pathlib import Path
    from harness import modes
    twin = copy.copy(modes.MODES["dflash_draft"])
    twin.name = "dflash_draft_copy"
    modes.MODES[twin.name] = twin

    from harness.search.case_strategy import why_not_runnable
    from harness.case.cases import fields_of, load_case_file
    from harness.cell.cell_matrix import expand_cells, skip_reason
    from harness.search.draw_caps import PROFILES
    from harness.ledger.known_failures import load_known_failures, match
    from harness.reporting.cell_schema import validate_cell
    from harness.reporting.matrix import build_grid
    from harness.base.results import cell_record
    from harness.cell.run_cell import run_cell

    folder = Path(sys.argv[1])
    [case] = load_case_file(folder / "copy.yaml")
    cells = expand_cells([case])
    twins = {cell.cell_id.replace("dflash_draft_copy", "dflash_draft"): cell for cell in cells}
    original = {cell.cell_id: cell for cell in expand_cells(load_case_file(folder / "original.yaml"))}
    assert cells and {cell.case.mode for cell in cells} == {"dflash_draft_copy"}, cells
    assert twins.keys() == original.keys(), (sorted(twins), sorted(original))
    for cell_id, cell in twins.items():  # the same rules decide what runs, none names the mode
        assert (skip_reason(cell) or "") == (skip_reason(original[cell_id]) or ""), cell_id

    fields = fields_of(case.spec) | dict(backends=["triton"], runners=["eager"])
    assert why_not_runnable("dflash_draft_copy", fields, PROFILES["cpu"]) is None

    eager = "dflash_draft-block3-bs1-triton-eager"
    mine, theirs = run_cell(twins[eager]), run_cell(original[eager])
    assert mine.ok and mine.worst.max_abs_err == theirs.worst.max_abs_err, (mine.describe(), theirs.describe())

    records = [validate_cell(cell_record({**cell.record_keys(), "nodeid": cell.cell_id, "rerun": "pytest"},
                                         "failed", "differs"), "child") for cell in cells]
    assert build_grid(records).modes == ["dflash_draft_copy"]
    [entry] = load_known_failures(folder / "KNOWN_FAILURES.md")
    assert all(match([entry], record) is entry for record in records)
    print("one mode entry:", len(cells), "cells")
""")

CASE = """\
mode: {mode}
cases:
  - name: block3-bs1
    bs: 1
    prefix_lens: 6
    input_lens: 3
    num_heads: 2
    num_kv_heads: 1
    head_dim: 32
    capture_bs: [1]
"""

LEDGER = """\
## KF-dflash-copy
- backend: *
- mode: dflash_draft_copy
- runner: *
- cases: block3-bs1
- reason: a ledger entry may name the new mode
- upstream: sglang#12345
- class: error
"""


def test_a_new_mode_entry_reaches_cases_cells_runs_reports_and_known_failures(tmp_path):
    files = {"copy.yaml": CASE.format(mode="dflash_draft_copy"), "original.yaml": CASE.format(mode="dflash_draft"),
             "KNOWN_FAILURES.md": LEDGER}
    assert "one mode entry:" in run_in_child(CHILD, tmp_path, files, timeout=600)
