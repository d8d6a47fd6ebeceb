"""Every entry point, given a wrong flag value or unusable input, says so in one line.

Each row runs the real command in a subprocess from the repository root, as a user would, and
checks: the exit status is non-zero, nothing is a traceback, the last line says what is wrong
(naming the flag or the file), commands that start no pytest print exactly that one line, and
no file appears or disappears anywhere but where the user pointed (nor in the repository,
the output folder out/ aside, where pytest's own run records go).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ROOT
from harness.reporting.test_reporting import RUN, make_cell
from harness.base.results import OUTPUT_DIR, RUN_ID_ENV
from harness.wheelhouse.manifest import FORMAT as MANIFEST_FORMAT

pytestmark = pytest.mark.release_independent

BAD_CASE = Path(__file__).parent.parent / "testdata" / "bad_cases" / "int_as_quoted_text.yaml"
NOT_IN_SNAPSHOT = {".git", "__pycache__", ".pytest_cache", ".venv", ".venvs"}

REPORTING = "-m harness.reporting"
WHEELHOUSE = "-m harness.wheelhouse"
PYTEST = "-m pytest harness/test_cases.py -p no:cacheprovider -q"
RESULTS = json.dumps({"runs": [RUN], "cells": [make_cell()]})


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """Good and bad inputs the commands are pointed at."""
    files = {
        "results.json": RESULTS,
        "not_json.json": "this is not json\n",
        "empty.json": "",
        "truncated.json": RESULTS[: len(RESULTS) // 2],
        "list.json": "[1, 2]",
        "no_cells.json": json.dumps({"runs": [RUN], "cells": []}),
        "run_not_record.json": json.dumps({"runs": ["night-1"], "cells": [make_cell()]}),
        "bad_cell.json": json.dumps({"runs": [RUN], "cells": [make_cell(status="exploded")]}),
        "README.md": "# a README without matrix markers\n",
        "run/gw0.jsonl": '{"cell_id": \n',
        "empty_run/run.json": json.dumps(RUN),
        "parts/wheelhouse-manifest.json": "{broken",
        "old_parts/wheelhouse-manifest.json": json.dumps({"format": MANIFEST_FORMAT}),  # this format, no fields
        "no_manifest/part.txt": "",
        "a_file": "",
        "bad_cases/bad.yaml": BAD_CASE.read_text(),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "binary_run").mkdir()
    (tmp_path / "binary_run" / "gw0.jsonl").write_bytes(bytes(range(256)))
    return tmp_path


# (id, arguments after `python`, what the last line must say, exit status). {d} is the inputs folder.
ROWS = [
    # python -m harness.reporting
    ("report-no-command", REPORTING, "the following arguments are required: command", 2),
    ("report-unknown-command", f"{REPORTING} bogus", "invalid choice: 'bogus'", 2),
    ("summary-missing-results", f"{REPORTING} summary --results {{d}}/missing.json --out {{d}}/s.md",
     "argument --results: {d}/missing.json: no such file", 2),
    ("summary-results-is-folder", f"{REPORTING} summary --results {{d}} --out {{d}}/s.md",
     "argument --results: {d} is a folder; give a file", 2),
    ("summary-not-json", f"{REPORTING} summary --results {{d}}/not_json.json --out {{d}}/s.md",
     "{d}/not_json.json: is not valid JSON (Expecting value at line 1)", 2),
    ("summary-empty", f"{REPORTING} summary --results {{d}}/empty.json --out {{d}}/s.md",
     "{d}/empty.json: is empty; write it again with merge", 2),
    ("summary-truncated", f"{REPORTING} summary --results {{d}}/truncated.json --out {{d}}/s.md",
     "{d}/truncated.json: is not valid JSON", 2),
    ("summary-wrong-schema", f"{REPORTING} summary --results {{d}}/list.json --out {{d}}/s.md",
     "{d}/list.json: expected {'runs': [...], 'cells': [...]}", 2),
    ("summary-no-cells", f"{REPORTING} summary --results {{d}}/no_cells.json --out {{d}}/s.md",
     "{d}/no_cells.json: holds no cells", 2),
    ("summary-run-not-record", f"{REPORTING} summary --results {{d}}/run_not_record.json --out {{d}}/s.md",
     "runs[0] is not a run record", 2),
    ("summary-bad-cell", f"{REPORTING} summary --results {{d}}/bad_cell.json --out {{d}}/s.md",
     "cells[0]: cell 'target_verify-tree-bs3-topk2-triton-eager': field 'status' is 'exploded'; valid:", 2),
    ("summary-out-in-missing-folder", f"{REPORTING} summary --results {{d}}/results.json --out {{d}}/missing/s.md",
     "argument --out: folder {d}/missing does not exist; create it first", 2),
    ("summary-out-is-folder", f"{REPORTING} summary --results {{d}}/results.json --out {{d}}",
     "argument --out: {d} is a folder; give a file path", 2),
    ("summary-out-under-file", f"{REPORTING} summary --results {{d}}/results.json --out {{d}}/a_file/s.md",
     "argument --out: {d}/a_file is a file, not a folder", 2),
    ("summary-missing-known-failures",
     f"{REPORTING} summary --results {{d}}/results.json --known-failures {{d}}/KF.md --out {{d}}/s.md",
     "argument --known-failures: {d}/KF.md: no such file", 2),
    ("heatmap-out-not-image", f"{REPORTING} heatmap --results {{d}}/results.json --out {{d}}/m.txt",
     "argument --out: {d}/m.txt: give a file ending in .png, .svg, .pdf", 2),
    ("heatmap-truncated", f"{REPORTING} heatmap --results {{d}}/truncated.json --out {{d}}/m.png",
     "{d}/truncated.json: is not valid JSON", 2),
    ("readme-unknown-section", f"{REPORTING} readme-matrix --section tpu", "invalid choice: 'tpu'", 2),
    ("readme-without-markers",
     f"{REPORTING} readme-matrix --results {{d}}/results.json --readme {{d}}/README.md --section cpu",
     "{d}/README.md has no <!-- matrix:cpu:start --> marker", 2),
    ("digest-without-yesterday", f"{REPORTING} digest --today {{d}}/results.json",
     "the following arguments are required: --yesterday", 2),
    ("digest-truncated-yesterday",
     f"{REPORTING} digest --today {{d}}/results.json --yesterday {{d}}/truncated.json --out {{d}}/D.md",
     "{d}/truncated.json: is not valid JSON", 2),
    ("merge-missing-folder", f"{REPORTING} merge {{d}}/nope --out-dir {{d}}/out",
     "argument run_dirs: {d}/nope: no such folder", 2),
    ("merge-no-cell-lines", f"{REPORTING} merge {{d}}/empty_run --out-dir {{d}}/out",
     "no cell lines found in {d}/empty_run", 2),
    ("merge-malformed-line", f"{REPORTING} merge {{d}}/run --out-dir {{d}}/out",
     "{d}/run/gw0.jsonl:1: not valid JSON", 2),
    ("merge-binary-lines", f"{REPORTING} merge {{d}}/binary_run --out-dir {{d}}/out",
     "{d}/binary_run/gw0.jsonl:1: not valid JSON", 2),
    ("merge-out-in-missing-folder", f"{REPORTING} merge {{d}}/run --out-dir {{d}}/missing/out",
     "argument --out-dir: folder {d}/missing does not exist", 2),
    ("coverage-missing-cases-dir", f"{REPORTING} coverage --cases-dir {{d}}/nope --out {{d}}/c.md",
     "argument --cases-dir: {d}/nope: no such folder", 2),
    ("coverage-bad-case-file", f"{REPORTING} coverage --cases-dir {{d}}/bad_cases --out {{d}}/c.md",
     "error: {d}/bad_cases/bad.yaml: case 'c': field 'bs': expected a whole number", 2),
    # python -m harness.search.pair_cover
    ("pair-cover-unknown-mode", "-m harness.search.pair_cover --mode bogus", "argument --mode: invalid choice: 'bogus'", 2),
    ("pair-cover-bad-case-file", "-m harness.search.pair_cover --cases-dir {d}/bad_cases",
     "python -m harness.search.pair_cover: {d}/bad_cases/bad.yaml: case 'c': field 'bs': expected a whole number", 2),
    # python -m harness run
    ("harness-no-command", "-m harness", "the following arguments are required: {run,record,findings}", 2),
    ("findings-unknown", "-m harness findings run no-such-finding", "no finding 'no-such-finding'; findings: fa-", 2),
    ("findings-bundle-unknown", "-m harness findings bundle no-such", "argument slug: invalid choice: 'no-such'", 2),
    ("harness-unknown-command", "-m harness bogus", "invalid choice: 'bogus'", 2),
    ("run-shard-not-fraction", "-m harness run --shard x", "argument --shard: 'x': expected i/n, e.g. 1/4", 2),
    ("run-shard-out-of-range", "-m harness run --shard 3/2", "argument --shard: '3/2': i must be between 1 and n", 2),
    ("run-workers-not-number", "-m harness run -n many",
     "argument -n/--workers: 'many': expected a number of workers", 2),
    ("run-unknown-section", "-m harness run --section tpu", "invalid choice: 'tpu'", 2),
    ("record-unknown-section", "-m harness record --section tpu", "invalid choice: 'tpu'", 2),
    ("record-missing-folder", "-m harness record --section cpu --from {d}/nope",
     "argument --from: {d}/nope: no such folder", 2),
    ("record-nothing-to-record", "-m harness record --section cpu --from {d}/empty_run",
     "{d}/empty_run: nothing to record for section cpu; it keeps results.json (python -m harness run)", 2),
    ("run-bad-case-file", "-m harness run -n 0 -- --cases-dir {d}/bad_cases",
     "pytest stopped (usage error, exit status 4); no reports written", 4),
    # python -m harness.bugs.replay, python -m harness.speed.bench
    ("replay-unknown-bug", "-m harness.bugs.replay --bug nope", "argument --bug: invalid choice: 'nope'", 2),
    ("replay-unknown-fix", "-m harness.bugs.replay --fix nope", "argument --fix: invalid choice: 'nope'", 2),
    ("replay-workers-not-number", "-m harness.bugs.replay -n abc", "argument -n/--workers: 'abc'", 2),
    ("replay-out-in-missing-folder", "-m harness.bugs.replay --out {d}/missing/out",
     "argument --out: folder {d}/missing does not exist", 2),
    ("replay-out-is-file", "-m harness.bugs.replay --out {d}/a_file",
     "argument --out: {d}/a_file is a file; give a folder", 2),
    ("bench-workers-not-numbers", "-m harness.speed.bench --workers a,b",
     "argument --workers: 'a,b': expected worker counts", 2),
    ("bench-workers-negative", "-m harness.speed.bench --workers 2,-1", "argument --workers: '2,-1'", 2),
    ("bench-out-is-file", "-m harness.speed.bench --out {d}/a_file",
     "argument --out: {d}/a_file is a file; give a folder", 2),
    ("bench-selects-nothing", "-m harness.speed.bench --warm-only --workers 0 --select zzz_no_such_cell --out {d}/bench",
     "the hand matrix warm run: pytest stopped (no cell selected, exit status 5)", 2),
    # python -m harness.probes.census_probe
    ("census-probe-bad-selection", "-m harness.probes.census_probe -k 'fa3 and (' --out {d}/probe",
     "error: -k 'fa3 and (': ", 2),
    ("census-probe-selects-nothing", "-m harness.probes.census_probe -k zzz_no_such_cell --out {d}/probe",
     "error: -k 'zzz_no_such_cell' selects no cell of cases/*.yaml", 2),
    ("census-probe-shard-not-fraction", "-m harness.probes.census_probe -k fa3 --out {d}/probe --shard 1/x",
     "error: --shard '1/x': expected i/n, e.g. 1/4", 2),
    # python -m harness.wheelhouse
    ("wheelhouse-no-command", WHEELHOUSE, "the following arguments are required: command", 2),
    ("plan-missing-parts", f"{WHEELHOUSE} stage-plan --parts {{d}}/nope",
     "argument --parts: {d}/nope: no such folder", 2),
    ("plan-no-manifest", f"{WHEELHOUSE} stage-plan --parts {{d}}/no_manifest",
     "{d}/no_manifest/wheelhouse-manifest.json not found", 1),
    ("plan-manifest-not-json", f"{WHEELHOUSE} stage-plan --parts {{d}}/parts",
     "{d}/parts/wheelhouse-manifest.json: not valid JSON", 1),
    ("plan-manifest-wrong-schema", f"{WHEELHOUSE} stage-plan --parts {{d}}/old_parts",
     "{d}/old_parts/wheelhouse-manifest.json: not a wheelhouse manifest this code reads (KeyError:", 1),
    ("stage-number-zero", f"{WHEELHOUSE} stage 0 --parts {{d}}/parts",
     "argument number: '0': expected a whole number of at least 1", 2),
    ("build-transfer-size-not-number", f"{WHEELHOUSE} build --out {{d}}/wh --transfer-mib x",
     "argument --transfer-mib: 'x': expected a positive number", 2),
    ("build-level-out-of-range", f"{WHEELHOUSE} build --out {{d}}/wh --level 99",
     "argument --level: '99': expected a whole number in 1..22", 2),
    ("build-out-in-missing-folder", f"{WHEELHOUSE} build --out {{d}}/missing/wh",
     "argument --out: folder {d}/missing does not exist", 2),
    ("install-target-under-file", f"{WHEELHOUSE} install --parts {{d}}/parts --target {{d}}/a_file/site",
     "argument --target: {d}/a_file is a file, not a folder", 2),
    ("install-manifest-not-json", f"{WHEELHOUSE} install --parts {{d}}/parts --target {{d}}/site",
     "{d}/parts/wheelhouse-manifest.json: not valid JSON", 1),
    ("verify-missing-target", f"{WHEELHOUSE} verify --target {{d}}/nope",
     "argument --target: {d}/nope: no such folder", 2),
    # the options the pytest plugin adds
    ("pytest-shard-not-fraction", f"{PYTEST} --shard 1/x", "ERROR: --shard '1/x': expected i/n, e.g. 1/4", 4),
    ("pytest-cases-dir-missing", f"{PYTEST} --cases-dir {{d}}/nope", "ERROR: {d}/nope: not a folder", 4),
    ("pytest-unknown-replay", f"{PYTEST} --replay nope", "ERROR: unknown replay 'nope'; known:", 4),
    ("pytest-unknown-fix", f"{PYTEST} --apply-fix nope",
     "ERROR: --apply-fix 'nope': no such fix; known fixes: fa-kv-past-context", 4),
    ("pytest-known-failures-missing", f"{PYTEST} --known-failures {{d}}/nope.md",
     "ERROR: {d}/nope.md: No such file or directory", 4),
    ("pytest-unknown-sanitizer", f"{PYTEST} --sanitize bogus",
     "ERROR: --sanitize 'bogus': expected 'none' or a comma-separated list of memcheck, racecheck", 4),
    ("pytest-confirm-crashes-not-number", f"{PYTEST} --confirm-crashes x",
     "error: argument --confirm-crashes: invalid int value: 'x'", 4),
]
# Rows whose output also holds the command echo and pytest's own line, which must say this.
STARTS_PYTEST = {"run-bad-case-file": "ERROR: {d}/bad_cases/bad.yaml: case 'c': field 'bs': expected a whole number"}
# pytest's own option parser (type=int options) prints its usage line first and its inifile and
# rootdir after the error: the clear line is there, but not last and not alone.
PYTEST_ARGPARSE = {"pytest-confirm-crashes-not-number"}


def _files(root: Path, skip: set[Path] = frozenset()) -> set[str]:
    found = set()
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [s for s in subfolders if s not in NOT_IN_SNAPSHOT and Path(folder, s) not in skip]
        found |= {str(Path(folder, name).relative_to(root)) for name in names}
    return found


@pytest.mark.parametrize("row_id, command, expected, status", ROWS, ids=[row[0] for row in ROWS])
def test_bad_input_gives_one_clear_line(inputs, row_id, command, expected, status):
    env = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV and not k.startswith("PYTEST_")}
    skip = {OUTPUT_DIR}
    before, repo_before = _files(inputs), _files(ROOT, skip)
    done = subprocess.run([sys.executable, *shlex.split(command.replace("{d}", str(inputs)))], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == status, lines
    clear = [line for line in lines if expected.replace("{d}", str(inputs)) in line]
    assert clear and (row_id in PYTEST_ARGPARSE or clear[-1] == lines[-1]), lines
    if row_id in STARTS_PYTEST:
        assert any(STARTS_PYTEST[row_id].replace("{d}", str(inputs)) in line for line in lines), lines
    elif row_id not in PYTEST_ARGPARSE:
        assert len(lines) == 1, lines
    assert _files(inputs) == before, "files appeared or vanished where the user did not point"
    assert _files(ROOT, skip) == repo_before, "files appeared or vanished in the repository"
