"""Adding a backend is one entry: a new BACKENDS entry, and nothing else, reaches every consumer.

A child process registers a copy of the Triton entry under a new name before anything reads the
registry (as an edit of harness/backends.py would), then follows a case naming only that backend
from YAML to the report: the case schema accepts it, the cell matrix expands it with the entry's
platform rules, a result line validates against the report schema, the matrix shows its row and a
KNOWN_FAILURES.md entry matches its cells. A second list of backend names anywhere on that path
would refuse the name and fail this test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from harness import ROOT


CHILD = textwrap.dedent("""
    import dataclasses, sys
    from pathlib import Path
    from harness import backends
    backends.BACKENDS["triton_copy"] = dataclasses.replace(backends.BACKENDS["triton"], name="triton_copy")

    from harness.cases import load_case_file
    from harness.cell_matrix import expand_cells, skip_reason
    from harness.known_failures import load_known_failures, match
    from harness.reporting.cell_schema import validate_cell
    from harness.reporting.matrix import build_grid
    from harness.results import cell_record

    folder = Path(sys.argv[1])
    cells = expand_cells(load_case_file(folder / "target_verify.yaml"))
    twins = {cell.cell_id.replace("triton_copy", "triton"): cell for cell in cells}
    original = {cell.cell_id: cell for cell in expand_cells(load_case_file(folder / "original.yaml"))}
    assert cells and {cell.backend for cell in cells} == {"triton_copy"}, cells
    assert twins.keys() == original.keys(), (sorted(twins), sorted(original))
    for cell_id, cell in twins.items():  # the entry's rules, not a list, decide what runs here
        assert (skip_reason(cell) or "").replace("triton_copy", "triton") == (skip_reason(original[cell_id]) or ""), cell_id

    records = [validate_cell(cell_record({**cell.record_keys(), "nodeid": cell.cell_id, "rerun": "pytest"},
                                         "failed", "differs"), "child") for cell in cells]
    assert {backend for backend, _ in build_grid(records).rows} == {"triton_copy"}
    [entry] = load_known_failures(folder / "KNOWN_FAILURES.md")
    assert all(match([entry], record) is entry for record in records)
    print("one entry:", len(cells), "cells")
""")

CASE = """\
mode: target_verify
cases:
  - name: chain-bs2
    bs: 2
    prefix_lens: [5, 37]
    topk: 1
    input_lens: 4
    num_heads: 4
    num_kv_heads: 2
    head_dim: 64
    backends: [{backend}]
"""

LEDGER = """\
## KF-triton-copy
- backend: triton_copy
- mode: target_verify
- runner: *
- cases: chain-bs2
- reason: a ledger entry may name the new backend
- upstream: sglang#12345
- class: error
"""


def run_in_child(child: str, folder: Path, files: dict[str, str], timeout: int = 300) -> str:
    """Write ``files`` into ``folder``, run ``child`` (given the folder) in a fresh interpreter, whose
    registries nothing has read yet; its stdout. A failing child fails the test with its stderr."""
    for name, text in files.items():
        (folder / name).write_text(text)
    done = subprocess.run([sys.executable, "-c", child, str(folder)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_new_backend_entry_reaches_cases_cells_reports_and_known_failures(tmp_path):
    files = {"target_verify.yaml": CASE.format(backend="triton_copy"), "original.yaml": CASE.format(backend="triton"),
             "KNOWN_FAILURES.md": LEDGER}
    assert "one entry:" in run_in_child(CHILD, tmp_path, files)
