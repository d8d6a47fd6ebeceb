"""same-outcomes: two runs compared by (cell id, status, reason), over run folders and results.json."""

import pytest

from harness.reporting.__main__ import main
from harness.reporting.outcomes import differences, outcomes
from harness.reporting.test_reporting import CELLS, make_cell, write_run

pytestmark = pytest.mark.release_independent


def test_identical_runs_have_no_differences():
    assert differences(outcomes(CELLS), outcomes(CELLS)) == []


def test_a_changed_status_a_changed_reason_and_a_missing_cell_are_each_named():
    skipped = make_cell(backend="fa4", status="skipped", reason="fa4 needs sm100")
    after = [make_cell(status="failed", reason="max_abs_err 0.25 > atol 1e-05"),
             {**skipped, "reason": "fa4 needs a CUDA GPU"}]
    found = differences(outcomes([make_cell(), skipped, make_cell(case="chain-bs1")]), outcomes(after))
    assert found == [
        "target_verify-chain-bs1-triton-eager: passed -> absent",
        "target_verify-tree-bs3-topk2-fa4-eager: skipped (fa4 needs sm100) -> skipped (fa4 needs a CUDA GPU)",
        "target_verify-tree-bs3-topk2-triton-eager: passed -> failed (max_abs_err 0.25 > atol 1e-05)",
    ]


def test_the_command_compares_run_folders_and_results_files(tmp_path, capsys):
    before = write_run(tmp_path / "before", {"gw0": CELLS[:5], "gw1": CELLS[5:]})
    same = write_run(tmp_path / "same", {"gw0": CELLS})
    assert main(["merge", str(before), "--out-dir", str(tmp_path / "merged")]) == 0
    capsys.readouterr()
    assert main(["same-outcomes", str(tmp_path / "merged" / "results.json"), str(same)]) == 0
    assert f"{len(CELLS)} cells, each with the same (status, reason)" in capsys.readouterr().out
    changed = write_run(tmp_path / "changed", {"gw0": [*CELLS[1:], {**CELLS[0], "status": "failed", "reason": "x"}]})
    assert main(["same-outcomes", str(before), str(changed)]) == 1
    assert f"1 of {len(CELLS)} cells differ" in capsys.readouterr().out


def test_errors_within_names_a_passed_cell_whose_error_moved(tmp_path, capsys):
    before = write_run(tmp_path / "before", {"gw0": CELLS})
    first = next(cell for cell in CELLS if cell["status"] == "passed")
    nudged = [{**cell, "max_abs_err": cell["max_abs_err"] + 1e-12} if cell["status"] == "passed" else cell
              for cell in CELLS]
    assert main(["same-outcomes", str(before), str(write_run(tmp_path / "nudged", {"gw0": nudged})),
                 "--errors-within", "1e-9"]) == 0
    assert "have the same max_abs_err within 1e-09" in capsys.readouterr().out
    moved = [{**cell, "max_abs_err": cell["max_abs_err"] + 1e-6} if cell is first else cell for cell in CELLS]
    assert main(["same-outcomes", str(before), str(write_run(tmp_path / "moved", {"gw0": moved})),
                 "--errors-within", "1e-9"]) == 1
    assert f"{first['cell_id']}: max_abs_err" in capsys.readouterr().out
