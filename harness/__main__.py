"""The main job: `python -m harness run` runs the case matrix here and writes reports/.

It runs the differential cells with pytest (one xdist worker per core, or per
GPU), then turns the per-cell lines into reports/<cpu|gpu>/: results.json
(the source of truth), junit.xml, SUMMARY.md, matrix.png, and the README
matrix section for this kind of machine. Its last line accounts for every
collected cell; it exits non-zero if any failed, crashed or did not run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from harness import platform
from harness.reporting.cell_schema import load_results
from harness.reporting.totals import totals_line
from harness.results import REPORTS_DIR, RUN_ID_ENV, run_id

ROOT = Path(__file__).resolve().parent.parent


def _step(*args: str) -> int:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, cwd=ROOT, check=False).returncode


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness run", description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--workers", default=None,
                        help="pytest-xdist workers (default: one per GPU on a GPU box, else one per core)")
    parser.add_argument("--shard", default="1/1", help="i/n: run one shard of the cells")
    parser.add_argument("--section", choices=("cpu", "gpu"), default="gpu" if platform.HAS_GPU else "cpu")
    parser.add_argument("--no-readme", action="store_true", help="leave README.md untouched")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    workers = args.workers or (str(platform.gpu_count()) if platform.HAS_GPU else "auto")
    os.environ[RUN_ID_ENV] = run_id()
    out = REPORTS_DIR / args.section
    tests = _step(sys.executable, "-m", "pytest", "-n", workers, "--shard", args.shard,
                  "harness/test_cases.py", "-p", "no:cacheprovider", "-q", *args.pytest_args)
    cells = str(REPORTS_DIR / "cells" / os.environ[RUN_ID_ENV])
    results = str(out / "results.json")
    steps = [
        ("merge", cells, "--out-dir", str(out)),
        ("summary", "--results", results, "--out", str(out / "SUMMARY.md")),
        ("heatmap", "--results", results, "--out", str(out / "matrix.png")),
    ]
    if not args.no_readme:
        steps.append(("readme-matrix", "--results", results, "--section", args.section))
    for step in steps:
        if _step(sys.executable, "-m", "harness.reporting", *step):
            return 1
    print(f"reports written to {out}")
    cells = load_results(out / "results.json")["cells"]
    print(totals_line(cells, str(out / "SUMMARY.md")))
    not_run = any(cell["status"] == "not_run" for cell in cells)
    return tests or int(not_run)


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] != "run":
        print("usage: python -m harness run [-n N] [--shard i/n] [--section cpu|gpu] [-- pytest args]")
        return 2
    return run(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
