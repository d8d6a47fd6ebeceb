"""The main job: `python -m harness run` runs the case matrix here and writes reports/.

It runs the differential cells with pytest (one xdist worker per core, or per
GPU: `--gpus N` spreads the cells over the first N GPUs of this host, each worker
pinned to one by harness/gpu_slots.py), then turns the per-cell lines into
reports/<cpu|gpu>/: results.json (the source of truth), junit.xml, SUMMARY.md, matrix.png, and the README
matrix section for this kind of machine. Its last line accounts for every
collected cell; it exits non-zero if any failed, crashed or did not run.
"""

from __future__ import annotations

import os
import subprocess
import sys

from harness import ROOT, cli, gpu_slots, platform
from harness.reporting.cell_schema import load_results
from harness.reporting.totals import totals_line
from harness.results import REPORTS_DIR, RUN_ID_ENV, run_id


def _step(*args: str) -> int:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, cwd=ROOT, check=False).returncode


def build_parser() -> cli.Parser:
    parser = cli.Parser(prog="python -m harness", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="run")
    run = commands.add_parser("run", help="run the case matrix here and write reports/<cpu|gpu>/")
    run.add_argument("-n", "--workers", type=cli.workers, default=None,
                     help="pytest-xdist workers (default: one per GPU on a GPU box, else one per core)")
    run.add_argument("--gpus", type=cli.positive_int, default=None, metavar="N",
                     help="spread the cells over the first N GPUs of this host, one worker per GPU "
                          "(k per GPU: add -n N*k); one merged report")
    run.add_argument("--shard", type=cli.shard, default="1/1", help="i/n: run one shard of the cells")
    run.add_argument("--section", choices=("cpu", "gpu"), default="gpu" if platform.HAS_GPU else "cpu")
    run.add_argument("--no-readme", action="store_true", help="leave README.md untouched")
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    return parser


def run(args) -> int:
    workers = args.workers or str(platform.default_workers())
    os.environ[RUN_ID_ENV] = run_id()
    out = REPORTS_DIR / args.section
    tests = _step(sys.executable, "-m", "pytest", "-n", workers, "--shard", args.shard,
                  "harness/test_cases.py", "-p", "no:cacheprovider", "-q", *args.pytest_args)
    cells = REPORTS_DIR / "cells" / os.environ[RUN_ID_ENV]
    if tests in cli.NO_CELL_RAN or not cells.is_dir():  # an interrupted run still has cells to report
        stopped = cli.pytest_stopped(tests, "python -m harness run")
        print(f"{stopped or 'python -m harness run: pytest recorded no cell'}; no reports written", file=sys.stderr)
        return tests or 1
    results = str(out / "results.json")
    steps = [
        ("merge", str(cells), "--out-dir", str(out)),
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.gpus:
        try:
            gpus = gpu_slots.choose_gpus(args.gpus, platform.visible_gpus() if platform.HAS_GPU else [])
        except gpu_slots.GpuChoiceError as error:
            parser.error(str(error))
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # pytest's workers split these among them
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
