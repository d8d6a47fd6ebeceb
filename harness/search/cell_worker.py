"""Runs drawn cases sent as JSON lines, one outcome line each: the shrinker's executor.

A separate process, so a candidate that kills its process (a segfault in
Triton's interpreter, a sticky CUDA error) ends this worker, not the
shrinker, which starts a new one and records the candidate as crashed.
Usage: python -m harness.search.cell_worker [--replay BUG] [--apply-fix FIX] < requests
"""

from __future__ import annotations

import argparse
import json
import sys

import harness  # noqa: F401  (Triton's interpreter switch before torch loads)
from harness.search.case_strategy import DrawnCase
from harness.cell.run_cell import CellSkipped, run_cell
from harness.cell.cell_matrix import expand_cells
from harness.ledger.failure_class import of_exception, of_mismatch
from harness.search.generated import as_case
from harness.bugs.seed_bugs import apply_requested

OUTCOME_MARK = "@@outcome "  # sglang logs to stdout too; outcome lines carry this mark


def outcome(drawn: DrawnCase) -> dict:
    """{status: passed|failed|skipped, failure: its class or None, message}."""
    (cell,) = expand_cells([as_case(drawn, "candidate", "shrink candidate")])
    try:
        result = run_cell(cell)
    except CellSkipped as reason:
        return dict(status="skipped", failure=None, message=str(reason))
    except Exception as error:  # noqa: BLE001 - any exception is a failure to classify
        failure = of_exception(error)
    else:
        if result.ok:
            return dict(status="passed", failure=None, message="")
        failure = of_mismatch(result)
    return dict(status="failed", failure=str(failure), message=failure.message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replay", default=None, help="inject this seed bug first")
    parser.add_argument("--apply-fix", default=None, help="apply this fix first")
    args = parser.parse_args(argv)
    apply_requested(args.replay, args.apply_fix)
    for line in sys.stdin:
        request = json.loads(line)
        answer = outcome(DrawnCase(request["mode"], request["fields"]))
        sys.stdout.write(OUTCOME_MARK + json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
