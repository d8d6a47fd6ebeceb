"""The main job: `python -m harness run` runs the case matrix here and writes out/<cpu|gpu>/.

It runs the differential cells with pytest (one xdist worker per core, or per
GPU: `--gpus N` spreads the cells over the first N GPUs of this host, each worker
pinned to one by harness/speed/gpu_slots.py), then turns the per-cell lines into
out/<cpu|gpu>/: results.json (the source of truth), junit.xml, SUMMARY.md and matrix.png, and
COVERAGE.md (the pairs of axis values the case matrix covers, harness/search/pair_coverage.py).
Its last line accounts for every collected cell; it exits non-zero if any failed,
crashed or did not run. The checkout is left as it was: `python -m harness record`
copies a run's outputs into the tracked reports/ and regenerates the docs matrix
(harness/session/record.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from harness import ROOT
from harness.base import cli, platform
from harness.bugs import findings
from harness.speed import gpu_slots
from harness.session.record import RECORDED, NothingToRecord, record
from harness.reporting.cell_schema import load_results
from harness.base.results import OUTPUT_DIR, RUN_ID_ENV, SECTION, narrowed_by, run_folder, run_id


RUN_EXAMPLES = """\
examples:
  python -m harness run                                   the whole matrix (CPU: about 5.5 minutes on 2 cores)
  python -m harness run -- -k triton-eager                a selection: cells whose id holds the words (pytest -k)
  python -m harness run -- -k 'draft_decode-chain-bs2-dtypefloat32-triton-eager'
                                                          one cell, by its id (the rerun line of a report names it)
  python -m harness run -- --cases-dir my_cases           your own case files (YAML, docs/cases.md) instead of cases/
  python -m harness run -- --replay pr26651               the matrix with a known sglang bug put back (docs/seed-bugs.md)

A run of a part of the matrix (-k, -m, --cases-dir) writes out/<section>-partial/, beside the last run
of the whole in out/<section>/, which `record` keeps. A shard (--shard i/n) writes out/<section>/ like
the whole; `python -m harness.reporting merge` joins the shards' out/cells/<run_id>/ folders.
"""


def _step(*args: str) -> int:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, cwd=ROOT, check=False).returncode


def build_parser() -> cli.Parser:
    parser = cli.Parser(prog="python -m harness", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,record,findings}")
    run = commands.add_parser("run", help="run the case matrix here and write out/<cpu|gpu>/",
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=RUN_EXAMPLES)
    run.add_argument("-n", "--workers", type=cli.workers, default=None,
                     help="pytest-xdist workers (default: as many as the host's cores and GPU memory allow, "
                          "harness/base/platform.py default_workers; one per core without a GPU)")
    run.add_argument("--gpus", type=cli.positive_int, default=None, metavar="N",
                     help="spread the cells over the first N GPUs of this host, the workers taking them in "
                          "turn (worker slot s on GPU s mod N); one merged report")
    run.add_argument("--shard", type=cli.shard, default="1/1", help="i/n: run one shard of the cells")
    run.add_argument("--section", choices=("cpu", "gpu"), default=SECTION,
                     help=f"the output folder out/<section>/ and the tracked reports/<section>/ the run is for "
                          f"(default here: {SECTION})")
    run.add_argument("pytest_args", nargs="*",
                     help="pytest arguments after --: -k to select cells, --cases-dir for your own case files "
                          "(examples below)")
    run.set_defaults(func=run_matrix)
    keep = commands.add_parser("record", help="copy a run's outputs into the tracked reports/<section>/ "
                                              "and regenerate the docs matrix")
    keep.add_argument("--section", choices=tuple(RECORDED), required=True)
    keep.add_argument("--from", dest="source", type=cli.input_folder, default=None,
                      help="the run's output folder (default out/<section>)")
    keep.add_argument("--partial", action="store_true",
                      help="record a run of a part of the matrix (-k, --cases-dir, a shard) over recorded results of "
                           "the whole, on purpose")
    keep.set_defaults(func=record_run)
    findings.add_commands(commands)
    return parser


def cases_dir(pytest_args: list[str]) -> str:
    """The case folder the run's pytest reads (its --cases-dir, else cases/)."""
    from harness.case.cases import CASES_DIR  # the case schema (and torch) only where a run needs them

    given = [arg.split("=", 1)[1] if "=" in arg else after
             for arg, after in zip(pytest_args, [*pytest_args[1:], ""]) if arg.split("=", 1)[0] == "--cases-dir"]
    return given[-1] if given else str(CASES_DIR)


def run_matrix(args) -> int:
    workers = args.workers or str(platform.default_workers())
    os.environ[RUN_ID_ENV] = run_id()
    out = OUTPUT_DIR / args.section
    tests = _step(sys.executable, "-m", "pytest", "-n", workers, "--shard", args.shard,
                  "harness/test_cases.py", "-p", "no:cacheprovider", "-q", *args.pytest_args)
    cells = run_folder(os.environ[RUN_ID_ENV])
    if tests in cli.NO_CELL_RAN or not cells.is_dir():  # an interrupted run still has cells to report
        stopped = cli.pytest_stopped(tests, "python -m harness run")
        print(f"{stopped or 'python -m harness run: pytest recorded no cell'}; no reports written", file=sys.stderr)
        _drop_empty(cells)
        return tests or 1
    part = narrowed_by(_selection_of(cells))
    if part:  # a part of the matrix is written beside the last run of the whole, never over it
        out = OUTPUT_DIR / f"{args.section}-partial"
    results = str(out / "results.json")
    steps = [
        ("merge", str(cells), "--out-dir", str(out), "--no-totals"),
        ("summary", "--results", results, "--out", str(out / "SUMMARY.md")),
        ("heatmap", "--results", results, "--out", str(out / "matrix.png")),
        ("coverage", "--cases-dir", cases_dir(args.pytest_args), "--out", str(out / "COVERAGE.md")),
    ]
    for step in steps:
        if _step(sys.executable, "-m", "harness.reporting", *step):
            return 1
    if part:
        print(f"reports written to {out}: this run selected {part}, a part of the matrix; "
              f"{OUTPUT_DIR / args.section} keeps the last run of the whole")
    else:
        print(f"reports written to {out}; to record them: python -m harness record --section {args.section}")
    not_run = any(cell["status"] == "not_run" for cell in load_results(out / "results.json")["cells"])
    return tests or int(not_run)


def _selection_of(cells_folder) -> dict | None:
    """What the run in this folder selected (its run.json), or None where it wrote none."""
    path = cells_folder / "run.json"
    return json.loads(path.read_text()).get("selection") if path.is_file() else None


def _drop_empty(folder) -> None:
    """A run that recorded nothing leaves no empty run folder behind."""
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def record_run(args) -> int:
    source = args.source or OUTPUT_DIR / args.section
    try:
        written = record(args.section, source, partial=args.partial)
    except NothingToRecord as problem:
        print(f"python -m harness record: {problem}", file=sys.stderr)
        return 2
    for path in written:
        print(f"recorded {path.relative_to(ROOT)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "gpus", None):
        try:
            gpus = gpu_slots.choose_gpus(args.gpus, platform.visible_gpus() if platform.HAS_GPU else [])
        except gpu_slots.GpuChoiceError as error:
            parser.error(str(error))
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # pytest's workers split these among them
    try:
        return args.func(args)
    except cli.UsageError as problem:
        print(f"{parser.prog}: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
