"""A red cell means a bug: a covered cell that fails outside its KNOWN_FAILURES.md signature is new.

One run of the drill matrix (seven Triton cells under the CPU interpreter, one worker) against a
ledger of its own (--known-failures), with errors injected into chosen cells' outputs by a plugin
(the key-census head, or a scored head, shifted before the comparison) and two cells segfaulting
their worker. Each cell shows one verdict:

| cell | ledger entry (signature) | injected | status |
| --- | --- | --- | --- |
| seed0 | KF-census (census-only, 0.01-0.01, margin x2) | census head +0.01 | xfailed: inside |
| seed1 | KF-census | census head +1: far beyond the range | failed: outside, the control |
| seed2 | KF-census | a scored head +0.5 | failed: outside, another class |
| seed3 | KF-crash (crash) | segfault | xfailed: inside |
| seed4 | KF-numeric (numeric) | segfault | crashed: outside |
| seed5 | KF-numeric | nothing | xpassed: the bug is fixed |
| seed6 | none | a scored head +0.5 | failed: new |
"""

from __future__ import annotations

import json
import os
import textwrap

from harness.cell.run_cell import FORCE_CRASH_ENV
from harness.ledger.test_accounting import CELL, DRILL_CASES

SHIFTS_ENV = "ATTN_HARNESS_TEST_SHIFTS"
CENSUS, SCORED = 1, 0  # the drill's two query heads: the last is the key-census head
SHIFTS = {CELL.format(0): [CENSUS, 0.01], CELL.format(1): [CENSUS, 1.0], CELL.format(2): [SCORED, 0.5],
          CELL.format(6): [SCORED, 0.5]}

LEDGER = """\
## KF-census
- backend: triton
- mode: target_verify
- runner: eager
- cases: drill-seed[012]
- reason: the census head is off by 0.01
- upstream: sglang#1
- class: census-only
- max_abs_err: 0.01-0.01, margin x2

## KF-crash
- backend: triton
- mode: *
- runner: *
- cases: drill-seed3
- reason: the process dies
- upstream: sglang#2
- class: crash

## KF-numeric
- backend: triton
- mode: *
- runner: *
- cases: drill-seed[45]
- reason: scored heads are off
- upstream: sglang#3
- class: numeric
- max_abs_err: 0.4-0.6, margin x1
"""

# A pytest plugin for the subprocess: shifts one head of the backend's output in the chosen cells,
# where run_cell hands it to the comparison.
SHIFT_PLUGIN = textwrap.dedent(f"""
    import json, os
    import harness.cell.run_cell as run_cell

    SHIFTS = json.loads(os.environ["{SHIFTS_ENV}"])
    original, running = run_cell.compare, {{}}

    def pytest_runtest_setup(item):
        running["cell"] = item.nodeid.rpartition("[")[2].rstrip("]")

    def shifted(out, ref, dtype, labels, *allowance, **how):
        head, shift = SHIFTS.get(running.get("cell"), (None, 0.0))
        if head is not None:
            out = out.clone()
            out[:, head] += shift
        return original(out, ref, dtype, labels, *allowance, **how)

    run_cell.compare = shifted
""")


def test_a_known_failure_turns_red_outside_its_signature(harness_run, tmp_path):
    (tmp_path / "shift_outputs.py").write_text(SHIFT_PLUGIN)
    ledger = tmp_path / "KNOWN_FAILURES.md"
    ledger.write_text(LEDGER)
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           SHIFTS_ENV: json.dumps(SHIFTS), FORCE_CRASH_ENV: "*-seed[34]-*"}
    done, _, cells = harness_run("harness/test_cases.py", "-n", "1", "--cases-dir", DRILL_CASES, "--known-failures", str(ledger),
                                "-p", "shift_outputs", "--confirm-crashes", "0", env=env)
    assert done.returncode == 1, done.stdout[-3000:]
    found = {cell_id.split("-")[2]: (cell["status"], cell["known_failure"], cell.get("failure_class"), cell["reason"])
             for cell_id, cell in cells.items()}
    assert {seed: status[:3] for seed, status in found.items()} == {
        "seed0": ("xfailed", "KF-census", "census-only"),
        "seed1": ("failed", "KF-census", "census-only"),
        "seed2": ("failed", "KF-census", "numeric"),
        "seed3": ("xfailed", "KF-crash", "crash"),
        "seed4": ("crashed", "KF-numeric", "crash"),
        "seed5": ("xpassed", "KF-numeric", None),
        "seed6": ("failed", None, "numeric"),
    }, found
    reasons = {seed: outcome[3] for seed, outcome in found.items()}
    assert reasons["seed0"].startswith("known failure KF-census: the census head is off by 0.01")
    assert ("outside the signature of KF-census: max_abs_err 1 is outside 0.005-0.02 "
            "(measured 0.01-0.01, margin x2); eager vs reference step 0: max_abs_err=1") in reasons["seed1"]
    assert ("outside the signature of KF-census: it fails as numeric (scored heads differ from the reference "
            "(finite errors)), the entry says census-only") in reasons["seed2"]
    assert reasons["seed3"] == "known failure KF-crash: the process dies"
    assert reasons["seed4"].startswith("outside the signature of KF-numeric: it fails as crash")
    assert f"crashed while running 'harness/test_cases.py::test_cell[{CELL.format(4)}]'" in reasons["seed4"]
    assert "differs from the torch reference" in reasons["seed6"]
    assert done.stdout.strip().splitlines()[-1] == ("attn-harness: all 7 collected cells accounted for: "
                                                   "3 failed, 1 crashed, 2 xfailed, 1 xpassed")
