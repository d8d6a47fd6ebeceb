"""Speed benchmark: `python -m harness.bench` -> reports/<cpu|gpu>/BENCH.{json,md}.

Measures, on this machine: the first run with cold kernel caches (FlashInfer
JIT, Triton) against the same run warm, and cells per second for several
pytest-xdist worker counts. It times whole pytest runs, as a user meets them,
including worker start-up (each worker imports sglang once).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness import cli, platform
from harness.results import REPORTS_DIR, RUN_ID_ENV

ROOT = Path(__file__).resolve().parent.parent
KERNEL_CACHES = (Path.home() / ".cache" / "flashinfer", Path.home() / ".triton" / "cache")


def timed_run(select: str, workers: int, label: str) -> dict:
    run = f"bench-{label.replace(' ', '-')}-{int(time.time())}"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers),
                           "harness/test_cases.py", "-k", select],
                          cwd=ROOT, env={**os.environ, RUN_ID_ENV: run}, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    stopped = cli.pytest_stopped(done.returncode, f"the {label} run")
    if stopped:
        last = (done.stderr + done.stdout).strip().splitlines()[-1:] or [""]
        raise cli.UsageError(f"{stopped}: {last[0]}")
    lines = [json.loads(line) for path in (REPORTS_DIR / "cells" / run).glob("*.jsonl")
             for line in path.read_text().splitlines()]
    executed = [r for r in lines if r["status"] != "skipped"]
    if not executed:
        raise cli.UsageError(f"--select {select!r} ran no cell here (all skipped); nothing to time")
    return {"label": label, "workers": workers, "wall_s": round(wall, 1), "cells": len(executed),
            "passed": sum(r["status"] == "passed" for r in executed),
            "cells_per_s": round(len(executed) / wall, 2) if wall else None}


def clear_kernel_caches() -> list[str]:
    cleared = []
    for cache in KERNEL_CACHES:
        if cache.exists():
            shutil.rmtree(cache)
            cleared.append(str(cache))
    return cleared


def markdown(result: dict) -> str:
    lines = [f"_{result['date']} · {result['device']} · select `{result['select']}`_", "",
             "| run | workers | cells | wall (s) | cells/s |", "| --- | --- | --- | --- | --- |"]
    for row in result["runs"]:
        lines.append(f"| {row['label']} | {row['workers']} | {row['cells']} | {row['wall_s']} | {row['cells_per_s']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--select", default="eager", help="pytest -k expression for the timed cells")
    parser.add_argument("--workers", type=cli.worker_counts, default="1,2,4,8",
                        help="worker counts for the scaling runs")
    parser.add_argument("--cold", action="store_true", help="clear kernel caches first and time a cold run")
    parser.add_argument("--out", type=cli.output_folder,
                        default=str(REPORTS_DIR / ("gpu" if platform.HAS_GPU else "cpu")))
    args = parser.parse_args(argv)
    counts = args.workers
    try:
        runs = []
        if args.cold:
            cleared = clear_kernel_caches()
            runs.append({**timed_run(args.select, counts[-1], "cold"), "cleared": cleared})
            runs.append(timed_run(args.select, counts[-1], "warm"))
        runs += [timed_run(args.select, n, f"scaling n={n}") for n in counts]
    except cli.UsageError as error:
        print(f"python -m harness.bench: {error}", file=sys.stderr)
        return 2
    result = {"date": time.strftime("%Y-%m-%d"), "device": platform.device_description()["device"],
              "select": args.select, "versions": platform.versions(), "runs": runs}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "BENCH.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "BENCH.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
