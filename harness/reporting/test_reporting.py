"""The reports a user relies on, built from small synthetic cell lines."""

import json
import xml.etree.ElementTree as ET

import pytest

from harness.reporting.__main__ import main
from harness.reporting.cell_schema import ReportingError, load_results
from harness.reporting.heatmap import NOT_RUN_COLOR, UNEXPECTED_COLOR, _fill
from harness.reporting.matrix import build_grid
from harness.reporting.merge import UNRECORDED, merge_runs
from harness.base.results import MANIFEST

pytestmark = pytest.mark.release_independent

RUN = {
    "run_id": "night-1", "started_at": "2026-11-22T01:00:00", "finished_at": "2026-11-22T01:10:00",
    "device": "NVIDIA H200", "driver": "570.86", "command": "pytest harness", "shard": "1/1",
    "workers": 2, "wall_s": 600.0,
    "versions": {"python": "3.11.2", "torch": "2.11.0", "triton": "3.6.0", "sglang": "0.5.17", "flash_attn_4": None},
}


def make_cell(case="tree-bs3-topk2", backend="triton", mode="target_verify", runner="eager", status="passed", **extra):
    cell_id = f"{mode}-{case}-{backend}-{runner}"
    nodeid = f"harness/test_cases.py::test_cell[{cell_id}]"
    cell = {
        "cell_id": cell_id, "case": case, "backend": backend, "mode": mode, "draft_shape": "tree",
        "host_mirrors": "full", "runner": runner, "padding": None, "capture_bs": None, "status": status, "reason": None,
        "known_failure": None, "max_abs_err": 1e-7, "max_rel_err": 3e-6, "mismatch_frac": 0.0,
        "tolerance": {"atol": 1e-5, "rtol": 1e-5}, "wall_s": 0.4, "nodeid": nodeid,
        "rerun": f"pytest '{nodeid}'",
    }
    return {**cell, **extra}


# One cell of each status; the matrix squares they land in are checked below.
CELLS = [
    make_cell(),
    make_cell(case="chain-bs1"),
    make_cell(backend="fa3", status="failed", max_abs_err=0.25, reason="max_abs_err 0.25 > atol 1e-05"),
    make_cell(backend="fa3", case="chain-bs1", status="crashed", max_abs_err=None, reason="RuntimeError: CUDA error"),
    make_cell(backend="fa4", status="skipped", reason="fa4 needs sm100", max_abs_err=None),
    make_cell(backend="fa4", case="chain-bs1", status="skipped", reason="fa4 needs sm100", max_abs_err=None),
    make_cell(backend="flashinfer", status="xfailed", known_failure="KF-fi-tree"),
    make_cell(backend="flashinfer", case="chain-bs1", status="xpassed", known_failure="KF-fi-chain"),
    make_cell(runner="cuda_graph", padding="prod_fill", capture_bs=4),
    make_cell(backend="torch_native", status="not_run", max_abs_err=None,
              reason="worker pool exhausted after 5 worker crashes (--max-worker-restart 4)"),
]
NOT_RUN = CELLS[-1]


def write_run(folder, workers, run=RUN):
    """A run folder as the plugin leaves it: run.json plus one .jsonl per worker."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(run))
    for worker, cells in workers.items():
        (folder / f"{worker}.jsonl").write_text("".join(json.dumps(cell) + "\n" for cell in cells))
    return folder


def write_results(path, cells, run=RUN):
    path.write_text(json.dumps({"runs": [run], "cells": cells}))
    return path


# merge ----------------------------------------------------------------------------------------

def test_merge_two_workers_and_duplicates(tmp_path):
    first = write_run(tmp_path / "cells" / "night-1", {"gw0": CELLS[:5], "gw1": CELLS[5:]})
    rerun = make_cell(backend="fa3", status="passed")  # a re-run shard repairs the failed cell
    second = write_run(tmp_path / "cells" / "night-1b", {"gw0": [rerun]}, run={**RUN, "run_id": "night-1b"})
    merged = merge_runs([first, second])
    ids = [cell["cell_id"] for cell in merged.results["cells"]]
    assert ids == sorted(cell["cell_id"] for cell in CELLS)
    assert [run["run_id"] for run in merged.results["runs"]] == ["night-1", "night-1b"]
    assert next(c for c in merged.results["cells"] if c["cell_id"] == rerun["cell_id"])["status"] == "passed"
    [warning] = merged.warnings
    assert rerun["cell_id"] in warning and "night-1b/gw0.jsonl:1 replaces" in warning


def test_merge_cli_writes_results_and_junit(tmp_path):
    run = write_run(tmp_path / "cells" / "night-1", {"gw0": CELLS[:4], "gw1": CELLS[4:]})
    assert main(["merge", str(run), "--out-dir", str(tmp_path)]) == 0
    assert len(load_results(tmp_path / "results.json")["cells"]) == len(CELLS)
    assert (tmp_path / "junit.xml").exists()


def test_merge_malformed_line_names_file_and_line(tmp_path):
    run = write_run(tmp_path / "night-1", {"gw0": CELLS[:2]})
    with open(run / "gw0.jsonl", "a") as lines:
        lines.write('{"cell_id": "truncated by a cr\n')
    with pytest.raises(ReportingError, match=r"night-1/gw0\.jsonl:3: not valid JSON"):
        merge_runs([run])


def test_merge_invalid_field_names_field_and_valid_values(tmp_path):
    run = write_run(tmp_path / "night-1", {"gw1": [make_cell(), make_cell(case="x", status="pass")]})
    with pytest.raises(ReportingError) as raised:
        merge_runs([run])
    message = str(raised.value)
    assert "gw1.jsonl:2" in message and "field 'status' is 'pass'" in message and "valid: passed, failed" in message


def test_records_from_before_the_draft_shape_split_still_merge(tmp_path):
    """A run recorded with the old 'variant' string merges as draft_shape + host_mirrors."""
    old = {k: v for k, v in make_cell().items() if k not in ("draft_shape", "host_mirrors")}
    run = write_run(tmp_path / "night-1", {"gw0": [{**old, "variant": "tree+gpu_only"}]})
    (cell,) = merge_runs([run]).results["cells"]
    assert (cell["draft_shape"], cell["host_mirrors"]) == ("tree", "gpu_only")
    assert "variant" not in cell


def test_padding_only_for_cuda_graph(tmp_path):
    run = write_run(tmp_path / "night-1", {"gw0": [make_cell(padding="prod_fill")]})
    with pytest.raises(ReportingError, match="field 'padding' is 'prod_fill' but runner is 'eager'"):
        merge_runs([run])


IDENTITY_FIELDS = ("cell_id", "case", "backend", "mode", "draft_shape", "host_mirrors", "runner", "padding",
                   "capture_bs", "nodeid", "rerun")


def write_manifest(folder, cells):
    (folder / MANIFEST).write_text(json.dumps({"cells": [{k: c[k] for k in IDENTITY_FIELDS} for c in cells]}))


def test_merge_turns_collected_cells_without_a_record_into_not_run(tmp_path, capsys):
    """A run killed part-way: three cells collected, one recorded; the totals still count three."""
    collected = [make_cell(), make_cell(case="chain-bs1"), make_cell(backend="fa3")]
    run = write_run(tmp_path / "cells" / "night-1", {"gw0": collected[:1]})
    write_manifest(run, collected)
    assert main(["merge", str(run), "--out-dir", str(tmp_path)]) == 0
    cells = {c["cell_id"]: c for c in load_results(tmp_path / "results.json")["cells"]}
    assert [cells[c["cell_id"]]["status"] for c in collected] == ["passed", "not_run", "not_run"]
    assert cells[collected[1]["cell_id"]]["reason"] == UNRECORDED
    assert cells[collected[1]["cell_id"]]["rerun"] == collected[1]["rerun"]
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("attn-harness: 2 of 3 collected cells NOT RUN (no result was recorded")
    assert f"all listed in {tmp_path / 'results.json'} [1 passed, 2 not_run]" in last


def test_merge_keeps_a_later_shard_record_over_not_run(tmp_path):
    first = write_run(tmp_path / "night-1", {"controller": [make_cell(status="not_run", reason="interrupted")]})
    second = write_run(tmp_path / "night-1b", {"gw0": [make_cell()]}, run={**RUN, "run_id": "night-1b"})
    [cell] = merge_runs([first, second]).results["cells"]
    assert cell["status"] == "passed"


def test_merge_folds_in_crash_attribution_and_sanitizer_notes(tmp_path):
    crashed = make_cell(status="crashed", reason="worker 'gw0' crashed while running", max_abs_err=None)
    run = write_run(tmp_path / "night-1", {"controller": [crashed]})
    (run / "notes-crash.json").write_text(json.dumps({crashed["cell_id"]: {
        "reproduced_alone": False, "lone_run": "passed: no message"}}))
    (run / "notes-sanitizer.json").write_text(json.dumps({crashed["cell_id"]: {
        "sanitizer": {"memcheck": "Invalid __global__ write of size 4 bytes\nat _store_one+0x70"}}}))
    [cell] = merge_runs([run]).results["cells"]
    assert (cell["reproduced_alone"], cell["lone_run"]) == (False, "passed: no message")
    assert cell["sanitizer"]["memcheck"].startswith("Invalid __global__ write")
    write_results(tmp_path / "results.json", [cell])
    out, ledger = tmp_path / "SUMMARY.md", tmp_path / "KNOWN_FAILURES.md"
    ledger.write_text("")
    assert main(["summary", "--results", str(tmp_path / "results.json"), "--known-failures", str(ledger),
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert "  - did NOT reproduce alone: passed: no message" in text
    assert "  - memcheck: Invalid __global__ write of size 4 bytes at _store_one+0x70" in text


def test_merge_rejects_a_note_of_the_wrong_type(tmp_path):
    run = write_run(tmp_path / "night-1", {"gw0": [make_cell(status="crashed")]})
    (run / "notes-crash.json").write_text(json.dumps({make_cell()["cell_id"]: {"reproduced_alone": "yes"}}))
    expected = r"notes-crash\.json: .*field 'reproduced_alone' is 'yes' \(str\); expected bool"
    with pytest.raises(ReportingError, match=expected):
        merge_runs([run])


def test_not_run_colours_its_square_unless_something_failed():
    grid = build_grid([NOT_RUN, make_cell(backend="fa3", status="failed"),
                       make_cell(backend="fa3", case="x", status="not_run", reason="r")])
    assert _fill(grid.tally(("torch_native", ("eager",)), "target_verify")) == NOT_RUN_COLOR
    assert _fill(grid.tally(("fa3", ("eager",)), "target_verify")) == UNEXPECTED_COLOR


# junit ----------------------------------------------------------------------------------------

def test_junit_statuses(tmp_path):
    run = write_run(tmp_path / "cells" / "night-1", {"gw0": CELLS})
    main(["merge", str(run), "--out-dir", str(tmp_path)])
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("10", "2", "2", "3")

    def outcome(cell):
        case = suite.find(f"testcase[@name='{cell['cell_id']}']")
        assert case.get("classname") == f"{cell['backend']}.{cell['mode']}.{cell['runner']}"
        return [(child.tag, child.get("message")) for child in case]

    assert outcome(CELLS[0]) == []
    assert outcome(CELLS[2]) == [("failure", "max_abs_err 0.25 > atol 1e-05")]
    assert outcome(CELLS[3]) == [("error", "RuntimeError: CUDA error")]
    assert outcome(CELLS[4]) == [("skipped", "fa4 needs sm100")]
    assert outcome(CELLS[6]) == [("skipped", "known failure: KF-fi-tree")]
    assert outcome(CELLS[7]) == [("failure", "UNEXPECTEDLY PASSED, drop KNOWN_FAILURES entry KF-fi-chain")]
    assert outcome(NOT_RUN) == [("error", f"not run: {NOT_RUN['reason']}")]
    assert "rerun: pytest" in suite.find(f"testcase[@name='{CELLS[2]['cell_id']}']/failure").text


# summary and heatmap --------------------------------------------------------------------------

def test_summary(tmp_path):
    results = write_results(tmp_path / "results.json", CELLS)
    ledger = tmp_path / "KNOWN_FAILURES.md"
    ledger.write_text(
        "## KF-fa4-sm100\n- backend: fa4\n- mode: *\n- runner: *\n- cases: *\n"
        "- reason: needs Blackwell\n- upstream: sglang#1\n- class: error\n\n"
        "## KF-gone\n- backend: triton\n- mode: *\n- runner: *\n- cases: no-such-case\n"
        "- reason: fixed long ago\n- upstream: sglang#2\n- class: error\n"
    )
    out = tmp_path / "SUMMARY.md"
    assert main(["summary", "--results", str(results), "--known-failures", str(ledger), "--out", str(out)]) == 0
    text = out.read_text()
    assert "2026-11-22 · NVIDIA H200 · driver 570.86" in text and "flash_attn_4" not in text
    assert "| backend | runner form | target_verify |" in text  # a column per mode, a row per form
    assert "| **triton** | eager | 2/2 · 1e-7 |\n|  | cuda_graph prod_fill | 1/1 · 1e-7 |" in text
    assert "| **fa3** | eager | 0/2 · 2.5e-1 · 1 crash · 1 fail |" in text
    # the known failures' error stands apart: nothing a known failure does not cover was measured here
    assert "| **flashinfer** | eager | 0/2 · – · 1 xpass max 1e-7 · 1 known max 1e-7 |" in text
    assert "| **fa4** |" not in text and "every cell skipped (SUMMARY.md gives the reasons under Skipped, by reason): fa4 (eager)" in text
    assert "| **torch_native** | eager | 0/0 · – · 1 not run |" in text
    assert "| not_run | 1 |" in text and "| total | 10 |" in text
    assert f"## Not run, by reason\n\n- **{NOT_RUN['reason']}** (1 cells): `{NOT_RUN['cell_id']}`" in text
    assert f"rerun: `{CELLS[3]['rerun']}`" in text
    assert "UNEXPECTEDLY PASSED, drop KNOWN_FAILURES entry KF-fi-chain" in text
    assert "| fa4 needs sm100 | 2 | fa4 | target_verify |" in text
    stale = text.split("## Stale KNOWN_FAILURES entries")[1]
    assert "KF-gone (sglang#2" in stale and "selects no cell of the matrix" in stale
    assert "KF-fa4-sm100" not in stale  # its cells were collected and skipped: this machine cannot judge it


def test_a_report_of_a_part_of_the_matrix_judges_no_entry_stale(tmp_path):
    """-k (or --cases-dir, or shards that leave some out) selects a part: an entry outside it is not stale."""
    ledger = tmp_path / "KNOWN_FAILURES.md"
    ledger.write_text("## KF-gone\n- backend: triton\n- mode: *\n- runner: *\n- cases: no-such-case\n"
                      "- reason: r\n- upstream: sglang#2\n- class: error\n")
    out = tmp_path / "SUMMARY.md"
    for selection, why in (({"keyword": "triton", "shard": "1/1"}, "selected -k 'triton'"),
                           ({"shard": "2/3"}, "shards 2/3 of the matrix")):
        results = write_results(tmp_path / "results.json", CELLS, run={**RUN, "selection": selection})
        assert main(["summary", "--results", str(results), "--known-failures", str(ledger), "--out", str(out)]) == 0
        stale = out.read_text().split("## Stale KNOWN_FAILURES entries")[1]
        assert "Not judged" in stale and why in stale and "KF-gone" not in stale


# why red, at a glance (SUMMARY.md and digest) ------------------------------------------------------

RED_NIGHT = [
    make_cell(backend="fa3", status="failed", failure_class="numeric", reason="differs"),
    make_cell(backend="fa3", case="x", status="failed", failure_class="numeric", reason="differs"),
    make_cell(backend="triton", status="failed", known_failure="KF-t", failure_class="numeric",
              reason="outside the signature of KF-t: it fails as numeric, the entry says census-only"),
    make_cell(backend="triton", case="x", status="crashed", known_failure="KF-t", failure_class="crash",
              reason="outside the signature of KF-t: it fails as crash"),
    make_cell(backend="fa4", status="xfailed", known_failure="KF-c", failure_class="census-only"),
    make_cell(backend="fa4", case="x", status="xfailed", known_failure="KF-c", failure_class="census-only"),
    make_cell(backend="flashinfer", status="xpassed", known_failure="KF-f"),
    make_cell(backend="torch_native", status="crashed", reason="worker 'gw0' crashed"),  # a record without a class
    make_cell(backend="fa3", case="y", status="not_run", reason="interrupted"),
    make_cell(case="fine"),
]
GLANCE = [
    ("**Red**: new failure: 3 cells, outside a known signature: 2 cells, unexpected pass: 1 cell, "
     "not run: 1 cell; known sglang bug: 2 cells."),
    "",
    "| verdict | failure class | backend | cells | KNOWN_FAILURES entries | first cell |",
    "|---|---|---|---|---|---|",
    f"| **new failure** | numeric | fa3 | 2 | – | `{RED_NIGHT[0]['cell_id']}` |",
    f"| **new failure** | unclassified | torch_native | 1 | – | `{RED_NIGHT[7]['cell_id']}` |",
    f"| **outside a known signature** | numeric | triton | 1 | KF-t | `{RED_NIGHT[2]['cell_id']}` |",
    f"| **outside a known signature** | crash | triton | 1 | KF-t | `{RED_NIGHT[3]['cell_id']}` |",
    f"| **unexpected pass** | passes | flashinfer | 1 | KF-f | `{RED_NIGHT[6]['cell_id']}` |",
    f"| **not run** | never ran | fa3 | 1 | – | `{RED_NIGHT[8]['cell_id']}` |",
    f"| known sglang bug | census-only | fa4 | 2 | KF-c | `{RED_NIGHT[4]['cell_id']}` |",
    "",
    "- new failure: no KNOWN_FAILURES.md entry covers these cells",
]


def test_summary_says_why_red_by_verdict_class_and_backend(tmp_path):
    ledger = tmp_path / "KNOWN_FAILURES.md"
    ledger.write_text("")
    out = tmp_path / "SUMMARY.md"
    assert main(["summary", "--results", str(write_results(tmp_path / "results.json", RED_NIGHT)),
                 "--known-failures", str(ledger), "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Red or green, and why\n\n" + "\n".join(GLANCE) in text
    assert "- known sglang bug: they fail inside their KNOWN_FAILURES.md signature" in text
    assert text.index("## Red or green, and why") < text.index("## Matrix")


def test_a_night_of_known_bugs_only_is_green(tmp_path):
    ledger = tmp_path / "KNOWN_FAILURES.md"
    ledger.write_text("")
    out = tmp_path / "SUMMARY.md"
    assert main(["summary", "--results", str(write_results(tmp_path / "results.json", RED_NIGHT[4:6] + RED_NIGHT[9:])),
                 "--known-failures", str(ledger), "--out", str(out)]) == 0
    text = out.read_text()
    assert "**Green**: no failure outside KNOWN_FAILURES.md signatures; known sglang bug: 2 cells." in text
    assert "**new failure**" not in text


def test_digest_says_why_today_is_red(tmp_path):
    today = RED_NIGHT
    yesterday = [make_cell(backend=cell["backend"], case=cell["case"]) for cell in RED_NIGHT]
    assert main(digest_args(tmp_path, today, yesterday)) == 1
    text = (tmp_path / "DIGEST.md").read_text()
    assert "## Today, by verdict, failure class and backend\n\n" + "\n".join(GLANCE) in text
    assert text.index("## Today, by verdict") < text.index("## New failures")


def test_heatmap_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "matrix.png"
    assert main(["heatmap", "--results", str(write_results(tmp_path / "r.json", CELLS)), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


# readme-matrix --------------------------------------------------------------------------------

README = "# attn-harness\n\nintro\n\n<!-- matrix:gpu:start -->\nold table\n<!-- matrix:gpu:end -->\n\nmore text\n"


def readme_args(results, readme, *extra):
    return ["readme-matrix", "--results", str(results), "--readme", str(readme), "--section", "gpu", *extra]


def test_readme_matrix_rewrite_then_check(tmp_path, capsys):
    results = write_results(tmp_path / "results.json", CELLS)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert main(readme_args(results, readme, "--check")) == 1  # "old table" is drift
    assert main(readme_args(results, readme)) == 0
    text = readme.read_text()
    assert text.startswith("# attn-harness\n\nintro\n\n<!-- matrix:gpu:start -->\n")
    assert text.endswith("<!-- matrix:gpu:end -->\n\nmore text\n") and "old table" not in text
    assert "| backend | runner form | target_verify |" in text
    assert "| triton | eager | 2/2 |\n|  | cuda_graph prod_fill | 1/1 |" in text
    assert "| fa3 | eager | 0/2 ❌ |" in text
    assert "| fa4 |" not in text and "every cell skipped (SUMMARY.md gives the reasons under Skipped, by reason): fa4 (eager)" in text
    assert "| torch_native | eager | 0/0 ⚠ 1 not run |" in text
    assert "| flashinfer | eager | 0/2 ❌ known: KF-fi-chain, KF-fi-tree |" in text
    assert "_2026-11-22 · NVIDIA H200 · driver 570.86 · python 3.11.2, torch 2.11.0" in text
    assert main(readme_args(results, readme, "--check")) == 0
    assert readme.read_text() == text  # idempotent


def test_readme_matrix_check_fails_on_drift(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    main(readme_args(write_results(tmp_path / "results.json", CELLS), readme))
    capsys.readouterr()
    flipped = [make_cell(status="failed", reason="boom") if c is CELLS[0] else c for c in CELLS]
    assert main(readme_args(write_results(tmp_path / "results.json", flipped), readme, "--check")) == 1
    out, err = capsys.readouterr()
    assert "-| triton | eager | 2/2 |" in out and "+| triton | eager | 1/2 ❌ |" in out
    assert "differs from" in err


def test_readme_matrix_missing_marker(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    results = write_results(tmp_path / "results.json", CELLS)
    assert main([*readme_args(results, readme)[:-1], "cpu"]) == 2
    err = capsys.readouterr().err
    assert "README.md has no <!-- matrix:cpu:start --> marker" in err and "<!-- matrix:cpu:end -->" in err


# digest ---------------------------------------------------------------------------------------

def digest_args(tmp_path, today, yesterday):
    return [
        "digest",
        "--today", str(write_results(tmp_path / "today.json", today)),
        "--yesterday", str(write_results(tmp_path / "yesterday.json", yesterday)),
        "--out", str(tmp_path / "DIGEST.md"),
    ]


def test_digest_unchanged_night_exits_0(tmp_path):
    assert main(digest_args(tmp_path, CELLS, CELLS)) == 0
    assert "**0 new failures, 0 new crashes" in (tmp_path / "DIGEST.md").read_text()


def test_digest_flags_new_failure_crash_xpass_fix_and_slowdown(tmp_path, capsys):
    yesterday = [
        make_cell(),
        make_cell(case="chain-bs1"),
        make_cell(backend="fa3", status="failed"),
        make_cell(backend="flashinfer", status="xfailed", known_failure="KF-fi-tree"),
        make_cell(backend="fa4", status="passed"),
        make_cell(case="gone"),
    ]
    today = [
        make_cell(status="failed", reason="max_abs_err 0.25 > atol 1e-05"),  # flipped
        make_cell(case="chain-bs1", wall_s=2.0),  # 0.4 s -> 2.0 s
        make_cell(backend="fa3", status="passed"),  # fixed
        make_cell(backend="flashinfer", status="xpassed", known_failure="KF-fi-tree"),
        make_cell(backend="fa4", status="crashed", reason="illegal memory access"),
        make_cell(case="brand-new", status="failed", reason="new case fails"),
    ]
    assert main(digest_args(tmp_path, today, yesterday)) == 1
    text = (tmp_path / "DIGEST.md").read_text()
    assert text == capsys.readouterr().out.split("wrote ")[0]
    assert "## New failures (2)" in text
    assert f"`{today[0]['cell_id']}` (passed → failed): max_abs_err 0.25 > atol 1e-05" in text
    assert f"`{today[5]['cell_id']}` (new → failed)" in text
    assert f"## New crashes (1)\n\n- `{today[4]['cell_id']}` (passed → crashed): illegal memory access" in text
    assert "UNEXPECTEDLY PASSED, drop KNOWN_FAILURES entry KF-fi-tree" in text
    assert f"## Fixed (1)\n\n- `{today[2]['cell_id']}` (failed → passed)" in text
    assert f"## Disappeared (1)\n\n- `{yesterday[5]['cell_id']}` (was passed)" in text
    assert f"- `{today[1]['cell_id']}`: 0.40 s → 2.00 s" in text


def test_digest_alarms_on_cells_that_newly_did_not_run(tmp_path):
    yesterday = [make_cell(), make_cell(case="chain-bs1", status="not_run", reason="interrupted")]
    today = [make_cell(status="not_run", reason="worker pool exhausted"),
             make_cell(case="chain-bs1", status="not_run", reason="interrupted")]
    assert main(digest_args(tmp_path, today, yesterday)) == 1
    text = (tmp_path / "DIGEST.md").read_text()
    assert "0 new crashes, 1 newly not run" in text
    assert (f"## Newly not run (1)\n\n- `{today[0]['cell_id']}` (passed → not_run): "
            "not run: worker pool exhausted") in text


def test_digest_xpass_alone_does_not_alarm(tmp_path):
    yesterday = [make_cell(status="xfailed", known_failure="KF-x")]
    today = [make_cell(status="xpassed", known_failure="KF-x")]
    assert main(digest_args(tmp_path, today, yesterday)) == 0
    assert "Unexpectedly passed: drop their KNOWN_FAILURES entries (1)" in (tmp_path / "DIGEST.md").read_text()


# phases ---------------------------------------------------------------------------------------

def test_phases_sum_per_runner_and_leave_the_rest_to_pytest(tmp_path, capsys):
    from harness.base.results import PHASES

    def timed(wall_s, **seconds):
        return {**dict.fromkeys(PHASES, 0.0), **seconds}, wall_s

    phases_a, wall_a = timed(2.0, imports=1.0, replay=0.5)
    phases_b, wall_b = timed(1.0, eager=0.75)
    cells = [make_cell(runner="cuda_graph", padding="prod_fill", capture_bs=4, phase_s=phases_a, wall_s=wall_a),
             make_cell(case="chain-bs1", phase_s=phases_b, wall_s=wall_b),
             make_cell(case="skipped", status="skipped", phase_s=None, wall_s=0.01)]
    run = write_run(tmp_path / "cells" / "night-1", {"gw0": cells})
    assert main(["phases", str(run)]) == 0
    table = capsys.readouterr().out
    assert "| cuda_graph | 1 | 2.0 | 2.00 | 1.0 (50%) |" in table and "| 0.5 (25%) | 0.0 (0%) | 0.0 (0%) | 0.0 (0%) | 0.5 (25%) |" in table
    assert "| all | 2 | 3.0 | 1.50 | 1.0 (33%) |" in table
    assert "wall 600.0 s with 2 worker(s); cells 3.0 s in all (1.5 s per worker)" in table


# rejudge --------------------------------------------------------------------------------------

LEDGER = ("## KF-fa3-tree\n- backend: fa3\n- mode: target_verify\n- runner: eager\n- cases: `tree-*`\n"
          "- reason: x\n- upstream: sglang#1\n- class: numeric\n- max_abs_err: 0.2-0.3, margin x1\n")


@pytest.mark.parametrize("record, verdict", [
    (make_cell(backend="fa3", status="failed", failure_class="numeric", max_abs_err=0.25), "inside"),
    (make_cell(backend="fa3", status="xfailed", failure_class="numeric", max_abs_err=0.9), "outside the signature"),
    (make_cell(backend="fa3", case="chain-bs1", status="failed", failure_class="numeric"), "no entry"),
    (make_cell(backend="fa3", status="passed"), "covered but passed"),
], ids=["a-new-entry-holds-yesterdays-failure", "outside-its-range", "no-entry", "an-entry-over-a-pass"])
def test_rejudge_reads_a_recorded_run_against_the_ledger_as_it_is_now(tmp_path, capsys, record, verdict):
    """An entry written after a run is checked against that run's records: it must hold its cells inside
    the signature and cover no cell that passed; only the first holds (exit 0)."""
    results = write_results(tmp_path / "results.json", [record, make_cell()])
    (tmp_path / "KNOWN_FAILURES.md").write_text(LEDGER)
    code = main(["rejudge", "--results", str(results), "--known-failures", str(tmp_path / "KNOWN_FAILURES.md")])
    out = capsys.readouterr().out
    assert f"| {verdict} |" in out and code == (0 if verdict == "inside" else 1)


def test_rejudge_never_guesses_the_class_of_a_record_without_one(tmp_path, capsys):
    """A failing record with no class (older than classes, or failed before its body) cannot be held
    against a signature: it is outside, never taken for one of the entry's classes."""
    record = make_cell(backend="fa3", status="failed", max_abs_err=0.25, failure_class=None)
    results = write_results(tmp_path / "results.json", [record])
    ledger = LEDGER.replace("- class: numeric\n- max_abs_err: 0.2-0.3, margin x1\n", "- class: error\n")
    (tmp_path / "KNOWN_FAILURES.md").write_text(ledger)
    code = main(["rejudge", "--results", str(results), "--known-failures", str(tmp_path / "KNOWN_FAILURES.md")])
    assert code == 1 and "the record carries no failure class" in capsys.readouterr().out


@pytest.mark.parametrize("ran, verdict", [("0.5.17", "inside"), ("0.5.23", "no entry")])
def test_rejudge_scopes_the_entries_by_the_release_the_run_used_not_the_installed_one(tmp_path, capsys, ran,
                                                                                      verdict):
    """A 0.5.17 run judged on a machine with 0.5.23 installed: an entry for 0.5.17 alone still holds its
    cells, and the same records from a 0.5.23 run are not held by it."""
    record = make_cell(backend="fa3", status="xfailed", failure_class="numeric", max_abs_err=0.25)
    run = {**RUN, "versions": {**RUN.get("versions", {}), "sglang": ran}}
    results = write_results(tmp_path / "results.json", [record], run=run)
    (tmp_path / "KNOWN_FAILURES.md").write_text(LEDGER + "- releases: 0.5.17\n")
    code = main(["rejudge", "--results", str(results), "--known-failures", str(tmp_path / "KNOWN_FAILURES.md")])
    assert f"| {verdict} |" in capsys.readouterr().out and code == (0 if verdict == "inside" else 1)


def test_rejudge_refuses_a_results_file_of_two_releases_in_one_line(tmp_path, capsys):
    runs = [{**RUN, "versions": {"sglang": version}} for version in ("0.5.17", "0.5.23")]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": runs, "cells": [make_cell()]}))
    assert main(["rejudge", "--results", str(path)]) != 0
    assert "its runs used sglang 0.5.17, 0.5.23; entries are scoped by release" in capsys.readouterr().err
