"""Speed benchmark: `python -m harness.bench` -> out/<cpu|gpu>/BENCH.{json,md}.

Times whole pytest runs of the cell matrix as a user meets them (process start, worker start-up,
imports, collection, the cells, the ledger at the end): first with cold kernel caches (FlashInfer
JIT, Triton), then the same run warm, then any other worker counts and, on a GPU host, the same
matrix over 1, 2, ... GPUs (`--gpus 1,2`). Each run reports executed cells per second (skipped
cells do not count) and the split of its wall time (harness/bench_timer.py), and every run must
give every cell the same (status, reason) as the first; a difference is listed and fails the
command. Each invocation is one session, labelled with the commit it timed and the machine's
load, added to the sessions already in BENCH.json (out/, else the recorded reports/), so before/after
figures sit side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import ROOT, cli, gpu_slots, platform
from harness.bench_timer import TIMES_ENV
from harness.reporting.outcomes import differences, load_cells, outcomes
from harness.results import OUTPUT_DIR, RECORDED_DIR, RUN_ID_ENV, SECTION, run_folder

KERNEL_CACHES = (Path.home() / ".cache" / "flashinfer", Path.home() / ".triton" / "cache")
PHASES = ("start + imports", "collection", "cells", "wind-down")
PER_PROCESS = "per process start + imports"  # the median over the processes that ran cells
COLUMNS = ("run", "workers", "cells", "executed", "wall (s)", "executed cells/s",
           *(f"{p} (s)" for p in (*PHASES, PER_PROCESS)), "executed s", "skipped s", "load")


def default_workers() -> str:
    """What `python -m harness run` uses: one worker per GPU, else one per core."""
    return str(platform.gpu_count() if platform.HAS_GPU else os.cpu_count() or 1)


def commit() -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def phase_split(marks: list[dict], launched: float, wall: float) -> dict:
    """The run's wall time cut where its last worker finished each phase (xdist schedules cells
    only once every worker has collected); the four parts add up to the wall time."""
    runners = [m for m in marks if m["worker"]] or marks
    configured = max(m.get("configured", launched) for m in runners) - launched
    collected = max(m.get("collected", launched) for m in runners) - launched
    cells_end = max(m.get("last_cell", m.get("collected", launched)) for m in runners) - launched
    parts = (configured, collected - configured, cells_end - collected, wall - cells_end)
    split = {name: round(part, 1) for name, part in zip(PHASES, parts)}
    split[PER_PROCESS] = round(statistics.median(
        m["configured"] - m["started"] for m in runners if "configured" in m), 1)
    return split


def timed_run(label: str, workers: int, select: str | None, gpus: list[str] | None = None) -> dict:
    """One pytest run of the matrix; its figures and its cells' outcomes (under "outcomes")."""
    run = f"bench-{label.replace(' ', '-').replace('=', '')}-{int(time.time())}"
    folder = run_folder(run)
    times = folder.parent / f"{run}.times.jsonl"
    env = {**os.environ, RUN_ID_ENV: run, TIMES_ENV: str(times)}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "harness.bench_timer",
               "-n", str(workers), "harness/test_cases.py", *(["-k", select] if select else [])]
    load_before = os.getloadavg()
    launched = time.time()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - launched
    marks = [json.loads(line) for line in times.read_text().splitlines()] if times.exists() else []
    times.unlink(missing_ok=True)
    stopped = cli.pytest_stopped(done.returncode, f"the {label} run")
    if stopped or not folder.is_dir():
        last = (done.stderr + done.stdout).strip().splitlines()[-1:] or [""]
        raise cli.UsageError(f"{stopped or f'the {label} run recorded no cell'}: {last[0]}")
    cells = load_cells(folder)
    executed = [c for c in cells if c["status"] != "skipped"]
    if not executed:
        raise cli.UsageError(f"--select {select!r} ran no cell here (all skipped); nothing to time")
    statuses = {status: sum(c["status"] == status for c in cells) for status in sorted({c["status"] for c in cells})}
    return {"label": label, "workers": workers, "gpus": len(gpus) if gpus else None, "run_id": run,
            "wall_s": round(wall, 1), "collected": len(cells), "executed": len(executed), "statuses": statuses,
            "executed_cells_per_s": round(len(executed) / wall, 3),
            "executed_cell_s": round(sum(c["wall_s"] or 0 for c in executed), 1),
            "skipped_cell_s": round(sum(c["wall_s"] or 0 for c in cells if c["status"] == "skipped"), 1),
            "split_s": phase_split(marks, launched, wall),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "outcomes": outcomes(cells)}


def clear_kernel_caches() -> list[str]:
    cleared = []
    for cache in KERNEL_CACHES:
        if cache.exists():
            shutil.rmtree(cache)
            cleared.append(str(cache))
    return cleared


def plan(args) -> list[tuple[str, int, list[str] | None]]:
    """(label, workers, GPUs) of each run, in order; the first is the one the others are checked against."""
    first, *others = args.workers
    runs = [] if args.warm_only else [("cold", first, None)]
    runs += [("warm", first, None)] + [(f"warm n={n}", n, None) for n in others]
    for count in args.gpus:
        gpus = gpu_slots.choose_gpus(count, platform.visible_gpus() if platform.HAS_GPU else [])
        runs.append((f"warm on {count} GPU(s)", count, gpus))
    return runs


def session(args) -> dict:
    timed = commit()  # before the runs: the tree may be committed to while they run
    runs, mismatches = [], {}
    for label, workers, gpus in plan(args):
        if label == "cold":
            cleared = clear_kernel_caches()
        runs.append(timed_run(label, workers, args.select, gpus))
        if label == "cold":
            runs[-1]["cleared"] = cleared
        found = differences(runs[0]["outcomes"], runs[-1]["outcomes"])
        if found:
            mismatches[label] = found
    for run in runs:
        del run["outcomes"]
    return {"label": args.label or timed, "commit": timed, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "device": platform.device_description()["device"], "cpus": os.cpu_count(),
            "versions": platform.versions(), "select": args.select or "the whole matrix",
            "runs": runs, "outcome_mismatches": mismatches}


def _row(run: dict) -> str:
    split = run["split_s"]
    return (f"| {run['label']} | {run['workers']} | {run['collected']} | {run['executed']} | {run['wall_s']} | "
            f"**{run['executed_cells_per_s']}** | " + " | ".join(str(split[p]) for p in PHASES)
            + f" | {split[PER_PROCESS]} | {run['executed_cell_s']} | "
            f"{run['skipped_cell_s']} | {' '.join(map(str, run['load_before']))} |")


def markdown(sessions: list[dict]) -> str:
    lines = ["# Benchmark: `python -m harness.bench`", "",
             "Executed cells per second (skipped cells excluded) over whole pytest runs. The split cuts the wall "
             "time where the last worker finished each phase: start + imports (controller and workers start, "
             "harness and torch imported, case files read), collection (test module and sglang imported, cells "
             "built, skips marked), cells (first scheduled to last finished), wind-down (ledger, exit). "
             "`executed s` / `skipped s` sum the cells' own pytest durations. Load: `uptime`'s 1/5/15-minute "
             "averages when the run started.", ""]
    for found in sessions:
        versions = ", ".join(f"{k} {v}" for k, v in sorted(found["versions"].items()) if v)
        lines += [f"## {found['label']}", "",
                  f"_{found['date']} · commit {found['commit']} · {found['device']} · {found['cpus']} CPUs · "
                  f"{versions} · {found['select']}_", "",
                  "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        lines += [_row(run) for run in found["runs"]]
        mismatches = found["outcome_mismatches"]
        lines += ["", "Every run gave every cell the same (status, reason) as the first." if not mismatches else
                  "**Outcomes differ from the first run:** " + "; ".join(
                      f"{label}: {len(found)} cells (first: {found[0]})" for label, found in mismatches.items())]
        lines += ["", *[f"- {note}" for note in found.get("notes", [])], ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--select", default=None, help="pytest -k expression (default: the whole matrix)")
    parser.add_argument("--workers", type=cli.worker_counts, default=default_workers(),
                        help="worker counts: the first for the cold and warm runs, the rest as extra warm runs")
    parser.add_argument("--gpus", type=cli.worker_counts, default=[],
                        help="GPU counts, e.g. 1,2: the warm matrix spread over that many GPUs of this host")
    parser.add_argument("--warm-only", action="store_true", help="keep the kernel caches; no cold run")
    parser.add_argument("--label", default=None, help="the session's heading (default: the timed commit)")
    parser.add_argument("--note", action="append", default=[], help="a line of context kept with the session")
    parser.add_argument("--out", type=cli.output_folder,
                        default=str(OUTPUT_DIR / SECTION))
    args = parser.parse_args(argv)
    try:
        found = {**session(args), "notes": args.note}
    except (cli.UsageError, gpu_slots.GpuChoiceError) as error:
        print(f"python -m harness.bench: {error}", file=sys.stderr)
        return 2
    path = args.out / "BENCH.json"
    # Sessions add up: to this folder's earlier ones, else to the recorded ones (python -m harness record).
    earlier = path if path.exists() else RECORDED_DIR / SECTION / "BENCH.json"
    sessions = json.loads(earlier.read_text())["sessions"] if earlier.exists() else []
    sessions.append(found)
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sessions": sessions}, indent=2) + "\n")
    (args.out / "BENCH.md").write_text(markdown(sessions))
    print(markdown([found]))
    return 1 if found["outcome_mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
