"""Adding an attention family is one package plus its YAML: nothing else on a cell's path names a family.

A child process registers a new family before anything reads the registry (as a package under
harness/families/ and its line in FAMILIES would): a copy of MLA's hooks under a new name, with one
backend entry of its own, whose cases live in cases/<its folder>/. It then follows a case file in
that folder from YAML to a finished cell and its report row: the loader takes the file's ``family``
and defaults the case's backends to the family's, the cell matrix expands it, one cell runs end to
end on the CPU (Triton under the interpreter) through the family's pool, draws and oracle, and its
record lands in the report grid. A loader, cell or report that knew the families by name would
refuse it or run it as dense, and this test would fail.
"""

from __future__ import annotations

from harness.fixtures.test_add_a_backend import run_in_child

CHILD = """
import dataclasses, sys
from pathlib import Path
import harness.families as families
from harness.families.mla import MlaFamily
from harness.families.mla.backends import ENTRIES

class LatentCopy(MlaFamily):
    name = "latent_copy"
    case_folder = "latent_copy"
    backends = {"triton_latent": dataclasses.replace(ENTRIES["triton_mla"], name="triton_latent")}

families.FAMILIES["latent_copy"] = LatentCopy()

from harness.case.cases import load_all_cases
from harness.cell.cell_matrix import expand_cells, collectable
from harness.cell.run_cell import run_cell
from harness.reporting.cell_schema import validate_cell
from harness.reporting.matrix import build_grid
from harness.base.results import cell_record

cases = load_all_cases(Path(sys.argv[1]))
mine = [case for case in cases if case.spec.family == "latent_copy"]
assert len(mine) == 1 and mine[0].spec.backends == ["triton_latent"], [c.spec for c in mine]
cells, _ = collectable(expand_cells(mine))
assert {cell.backend for cell in cells} == {"triton_latent"}, cells
eager = next(cell for cell in cells if cell.runner == "eager")
result = run_cell(eager)
assert result.ok and result.comparisons, result.describe()
record = validate_cell(cell_record({**eager.record_keys(), "nodeid": eager.cell_id, "rerun": "pytest"}, "passed", ""),
                       "child")
assert {backend for backend, _ in build_grid([record]).rows} == {"triton_latent"}
print("one family:", len(cells), "cells;", eager.cell_id, "passed")
"""

CASE = """\
mode: target_verify
family: latent_copy
defaults:
  model: deepseek-v2-lite
  num_heads: 2
cases:
  - name: latent-chain
    bs: 2
    prefix_lens: [5, 20]
    input_lens: 4
    runners: [eager, cg_meta]
"""


def test_a_new_family_is_one_package_plus_its_yaml(tmp_path):
    (tmp_path / "latent_copy").mkdir()
    (tmp_path / "latent_copy" / "target_verify.yaml").write_text(CASE)
    # a top-level file too: the loader needs one, and dense cases sit beside the family's folder
    dense = "mode: target_verify\ncases:\n  - {name: chain, bs: 1, prefix_lens: [3], input_lens: 4, backends: [triton]}\n"
    out = run_in_child(CHILD, tmp_path, {"target_verify.yaml": dense})
    assert "one family:" in out and "passed" in out
