"""Speed benchmark: `python -m harness.speed.bench` -> out/<cpu|gpu>/BENCH.{json,md}.

Times whole pytest runs as a user meets them (process start, worker start-up, imports, the
warm-up pass, collection, the cells, the ledger at the end), over two tiers: the hand matrix
(cases/*.yaml) and, with ``--generated N``, a fixed-seed generated tier alone (the profile of this
machine, e.g. production shapes on a GPU). Per tier: first with cold kernel caches
(harness/base/kernel_caches.py), then the same run warm, then any other worker counts and, on a GPU
host, the same cells over 1, 2, ... GPUs (``--gpus 1,2``). Each run reports executed cells per
second (skipped cells do not count), the split of its wall time (harness/speed/bench_timer.py) and
where its cells' own time went (the phases of harness/base/results.py, summed); every run of a tier
must give every cell the same (status, reason) as the tier's first, or the command lists the
cells and fails. ``--tree`` times another checkout of the harness (the code before a change) with
this benchmark. Each invocation is one session, labelled with the commit it timed and the
machine's load, added to the sessions already in BENCH.json (out/, else the recorded reports/),
so before/after sit side by side.
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

from harness import ROOT
from harness.base import cli, kernel_caches, platform
from harness.speed import gpu_slots
from harness.speed.bench_timer import TIMES_ENV
from harness.reporting.outcomes import differences, load_cells, outcomes
from harness.base.results import PHASES as CELL_PHASES
from harness.base.results import CELLS_DIR, OUTPUT_DIR, RECORDED_DIR, RUN_ID_ENV, SECTION

PHASES = ("start + imports", "collection", "waiting for warm-up", "cells", "wind-down")
WARM_UP = "warm-up pass, alongside"  # its whole length, overlapping start-up and collection
PER_PROCESS = "per process start + imports"  # the median over the processes that ran cells
COLUMNS = ("run", "workers", "cells", "executed", "wall (s)", "executed cells/s",
           *(f"{p} (s)" for p in (*PHASES, WARM_UP, PER_PROCESS)), "executed s", "skipped s", "load")
HAND, GENERATED = "hand matrix", "generated"


def default_workers() -> str:
    """What `python -m harness run` uses (harness/base/platform.py default_workers)."""
    return str(platform.default_workers())


def commit(tree: Path) -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=tree, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def phase_split(marks: list[dict], launched: float, wall: float, warm_up: dict) -> dict:
    """The run's wall time cut where its last worker finished each phase (xdist schedules cells
    only once every worker has collected); the parts add up to the wall time. The warm-up pass runs
    alongside the workers' start and collection: only what it adds after collection is its own part,
    ``waiting for warm-up``; its whole length is given beside the parts. A worker xdist starts in
    place of one that died (a cell that crashed its process) starts while cells run: its start-up and
    collection are not the run's, only its cells are."""
    runners = [m for m in marks if m["worker"]] or marks
    first_cell = min((m["first_cell"] for m in runners if "first_cell" in m), default=None)
    at_launch = [m for m in runners if first_cell is None or m["started"] < first_cell] or runners
    configured = max(m.get("configured", launched) for m in at_launch) - launched
    collected = max(m.get("collected", launched) for m in at_launch) - launched
    cells_end = max(m.get("last_cell", m.get("collected", launched)) for m in runners) - launched
    warmed = max(collected, (warm_up.get("ended_at") or launched) - launched)
    parts = (configured, collected - configured, warmed - collected, cells_end - warmed, wall - cells_end)
    split = {name: round(part, 1) for name, part in zip(PHASES, parts)}
    split[WARM_UP] = warm_up.get("seconds") or 0.0
    split[PER_PROCESS] = round(statistics.median(
        m["configured"] - m["started"] for m in at_launch if "configured" in m), 1)
    return split


def cell_phases(executed: list[dict]) -> dict:
    """Where the executed cells' own time went: each phase of harness/base/results.py summed over them."""
    timed = [cell for cell in executed if cell.get("phase_s")]
    return {name: round(sum(cell["phase_s"].get(name, 0.0) for cell in timed), 1) for name in CELL_PHASES}


def tree_run_folder(tree: Path, run: str) -> Path:
    """Where ``tree``'s harness put this run's records: out/cells/<run>, or reports/cells/<run> for a
    checkout from before runs moved to out/ (so --tree can time the code before a change)."""
    current = tree / CELLS_DIR.relative_to(ROOT) / run
    return current if current.is_dir() else tree / RECORDED_DIR.relative_to(ROOT) / "cells" / run


def tier_args(tier: str, args) -> list[str]:
    """The pytest arguments that select a tier's cells."""
    if tier == HAND:
        return ["-k", args.select] if args.select else []
    return ["--generated", str(args.generated), "--generated-seed", str(args.generated_seed), "--generated-only",
            *(["--generated-profile", args.generated_profile] if args.generated_profile else []),
            *(["--generated-budget", str(args.generated_budget)] if args.generated_budget else [])]


def timed_run(label: str, workers: int, pytest_args: list[str], tree: Path, gpus: list[str] | None = None) -> dict:
    """One pytest run of ``tree``'s cells; its figures and its cells' outcomes (under "outcomes")."""
    run = f"bench-{label.replace(' ', '-').replace('=', '')}-{int(time.time())}"
    times = CELLS_DIR / f"{run}.times.jsonl"
    times.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, RUN_ID_ENV: run, TIMES_ENV: str(times.resolve())}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "harness.speed.bench_timer",
               "-n", str(workers), "harness/test_cases.py", *pytest_args]
    load_before = os.getloadavg()
    launched = time.time()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - launched
    marks = [json.loads(line) for line in times.read_text().splitlines()] if times.exists() else []
    times.unlink(missing_ok=True)
    stopped = cli.pytest_stopped(done.returncode, f"the {label} run")
    folder = tree_run_folder(tree, run)
    if stopped or not folder.is_dir():
        last = (done.stderr + done.stdout).strip().splitlines()[-1:] or [""]
        raise cli.UsageError(f"{stopped or f'the {label} run recorded no cell'}: {last[0]}")
    cells = load_cells(folder)
    executed = [c for c in cells if c["status"] != "skipped"]
    if not executed:
        raise cli.UsageError(f"the {label} run ran no cell here (all skipped): {' '.join(pytest_args)}")
    statuses = {status: sum(c["status"] == status for c in cells) for status in sorted({c["status"] for c in cells})}
    run_info = folder / "run.json"
    warm_up = (json.loads(run_info.read_text()).get("warm_up") if run_info.exists() else None) or {}
    return {"label": label, "workers": workers, "gpus": len(gpus) if gpus else None, "run_id": run,
            "wall_s": round(wall, 1), "collected": len(cells), "executed": len(executed), "statuses": statuses,
            "executed_cells_per_s": round(len(executed) / wall, 3),
            "executed_cell_s": round(sum(c["wall_s"] or 0 for c in executed), 1),
            "skipped_cell_s": round(sum(c["wall_s"] or 0 for c in cells if c["status"] == "skipped"), 1),
            "split_s": phase_split(marks, launched, wall, warm_up),
            "warm_up": warm_up or None, "cell_phase_s": cell_phases(executed),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "outcomes": outcomes(cells)}


def clear_kernel_caches() -> list[str]:
    cleared = []
    for cache in kernel_caches.folders():
        if cache.exists():
            shutil.rmtree(cache)
            cleared.append(str(cache))
    return cleared


def plan(args) -> list[tuple[str, str, int, list[str] | None]]:
    """(tier, label, workers, GPUs) of each run, in order; a tier's first run is the one its others
    are checked against. Kernel caches are cleared once, before the first run, if at all."""
    first, *others = args.workers
    tiers = [HAND] * (not args.generated_only) + [GENERATED] * bool(args.generated)
    runs = []
    for tier in tiers:
        cold = not args.warm_only and not runs
        runs += [(tier, "cold", first, None)] * cold
        runs += [(tier, "warm", first, None)] + [(tier, f"warm n={n}", n, None) for n in others]
        for count in args.gpus:
            gpus = gpu_slots.choose_gpus(count, platform.visible_gpus() if platform.HAS_GPU else [])
            runs.append((tier, f"warm on {count} GPU(s)", count, gpus))
    return runs


def session(args) -> dict:
    timed = commit(args.tree)  # before the runs: the tree may be committed to while they run
    runs, mismatches, first_of = [], {}, {}
    for tier, label, workers, gpus in plan(args):
        cleared = clear_kernel_caches() if label == "cold" else None
        extra = ["--shard", args.shard] if args.shard != "1/1" else []
        run = timed_run(f"{tier} {label}", workers, tier_args(tier, args) + extra, args.tree, gpus)
        run["tier"] = tier
        if cleared is not None:
            run["cleared"] = cleared
        runs.append(run)
        first = first_of.setdefault(tier, run)
        found = differences(first["outcomes"], run["outcomes"])
        if found:
            mismatches[run["label"]] = found
    for run in runs:
        del run["outcomes"]
    generated = (f"; generated: {args.generated} cells, seed {args.generated_seed}, profile "
                 f"{args.generated_profile or 'this machine'}" if args.generated else "")
    return {"label": args.label or timed, "commit": timed, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "device": platform.device_description()["device"], "cpus": os.cpu_count(),
            "versions": platform.versions(),
            "select": (args.select or "the whole matrix") + (f", shard {args.shard}" if args.shard != "1/1" else "")
            + generated, "runs": runs, "outcome_mismatches": mismatches}


def _row(run: dict) -> str:
    split = run["split_s"]
    return (f"| {run['label']} | {run['workers']} | {run['collected']} | {run['executed']} | {run['wall_s']} | "
            f"**{run['executed_cells_per_s']}** | " + " | ".join(str(split.get(p, "")) for p in (*PHASES, WARM_UP))
            + f" | {split[PER_PROCESS]} | {run['executed_cell_s']} | "
            f"{run['skipped_cell_s']} | {' '.join(map(str, run['load_before']))} |")


def _phase_row(run: dict) -> str | None:
    phases = run.get("cell_phase_s")
    if not phases:
        return None
    whole = sum(phases.values()) or 1.0
    phases = {phase: phases.get(phase, 0.0) for phase in CELL_PHASES}  # a session recorded before a phase existed
    return f"| {run['label']} | " + " | ".join(f"{phases[p]} ({phases[p] / whole:.0%})" for p in CELL_PHASES) + " |"


def markdown(sessions: list[dict]) -> str:
    lines = ["# Benchmark: `python -m harness.speed.bench`", "",
             "Executed cells per second (skipped cells excluded) over whole pytest runs. The split cuts the wall "
             "time where the last worker finished each phase: start + imports (controller and workers start, "
             "harness and torch imported, case files read), collection (test module and sglang imported, cells "
             "built, skips marked; on a GPU sglang imported here too), waiting for warm-up (what the warm-up pass "
             "added after collection), cells (first scheduled to last finished), wind-down (ledger, exit); the "
             "warm-up pass's whole length, which overlaps start-up and collection, is given beside them. "
             "`executed s` / `skipped s` sum the cells' own pytest durations. Load: `uptime`'s 1/5/15-minute "
             "averages when the run started.", ""]
    for found in sessions:
        versions = ", ".join(f"{k} {v}" for k, v in sorted(found["versions"].items()) if v)
        lines += [f"## {found['label']}", "",
                  f"_{found['date']} · commit {found['commit']} · {found['device']} · {found['cpus']} CPUs · "
                  f"{versions} · {found['select']}_", "",
                  "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        lines += [_row(run) for run in found["runs"]]
        phase_rows = [row for row in map(_phase_row, found["runs"]) if row]
        if phase_rows:
            lines += ["", "Where the executed cells' own time went (seconds summed over cells, share):", "",
                      "| run | " + " | ".join(CELL_PHASES) + " |", "|" + " --- |" * (len(CELL_PHASES) + 1),
                      *phase_rows]
        mismatches = found["outcome_mismatches"]
        lines += ["", "Every run gave every cell the same (status, reason) as its tier's first." if not mismatches else
                  "**Outcomes differ from the first run:** " + "; ".join(
                      f"{label}: {len(found)} cells (first: {found[0]})" for label, found in mismatches.items())]
        lines += ["", *[f"- {note}" for note in found.get("notes", [])], ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.speed.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--select", default=None, help="pytest -k expression over the hand matrix (default: all)")
    parser.add_argument("--shard", type=cli.shard, default="1/1", help="i/n: time one shard of each tier")
    parser.add_argument("--generated", type=int, default=0, metavar="N",
                        help="also time a generated tier of N cells alone (0: none)")
    parser.add_argument("--generated-seed", type=int, default=0, help="its seed")
    parser.add_argument("--generated-profile", default=None, help="its draw profile (default: this machine's)")
    parser.add_argument("--generated-budget", type=float, default=0, metavar="SECONDS",
                        help="skip generated cells that would start after this many seconds (0: no limit)")
    parser.add_argument("--generated-only", action="store_true", help="time the generated tier alone")
    parser.add_argument("--tree", type=cli.input_folder, default=ROOT,
                        help="the checkout whose harness is timed (default: this one), e.g. one at the commit "
                             "before a change")
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
        print(f"python -m harness.speed.bench: {error}", file=sys.stderr)
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
