"""Seed-bug replay runs and the kill table: `python -m harness.replay [--bug ID ...]`.

For each replayed bug, run the part of the matrix that should catch it with the
bug injected, and report which cells killed it and with what message. A bug no
cell kills has survived, and the command fails. A clean run of the same cells
(no bug) must pass, so a kill means the bug, not a broken harness.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness import cli, platform
from harness.results import REPORTS_DIR, RUN_ID_ENV
from harness.seed_bugs import SEED_BUGS

KILLING = ("failed", "crashed")


def _run(bug_id: str | None, selector: str, workers: str) -> list[dict]:
    """Run the selected cells (optionally with a bug injected); return their result lines."""
    run = f"replay-{bug_id or 'clean'}-{int(time.time())}"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
               "harness/test_cases.py", "-k", selector]
    if bug_id:
        command += ["--replay", bug_id]
    done = subprocess.run(command, env={**os.environ, RUN_ID_ENV: run}, cwd=Path(__file__).parent.parent,
                          capture_output=True, text=True, check=False)
    if done.returncode in (3, 4):  # internal or usage error: the replay itself did not apply
        tail = (done.stderr + done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"replay {bug_id or 'clean'} could not run: {' / '.join(tail)}")
    folder = REPORTS_DIR / "cells" / run
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]


def _contract_results(bug_id: str | None, selector: str) -> list[dict]:
    """The host-mirror contract tests are plain tests: read their outcome from pytest."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "harness/test_host_mirror_contract.py", "-k", selector, "-rfE"]
    if bug_id:
        command += ["--replay", bug_id]
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    return [{"cell_id": line.split("::")[-1].split(" ")[0], "status": "failed",
             "reason": line.partition(" - ")[2][:300]} for line in failed]


def replay(bug_id: str, workers: str) -> dict:
    bug = SEED_BUGS[bug_id]
    started = time.time()
    injected = _run(bug_id, bug.cells, workers) + _contract_results(bug_id, bug.cells)
    clean = _run(None, bug.cells, workers) + _contract_results(None, bug.cells)
    executed = [r for r in injected if r["status"] != "skipped"]
    kills = [{"cell": r["cell_id"], "status": r["status"], "message": r.get("reason")}
             for r in executed if r["status"] in KILLING]
    false_kills = [r["cell_id"] for r in clean if r["status"] in KILLING]
    verdict = "killed" if kills and not false_kills else "survived" if not false_kills else "harness broken"
    return {"bug": bug_id, "upstream": bug.upstream, "summary": bug.summary, "verdict": verdict,
            "kills": kills, "executed": len(executed), "false_kills": false_kills,
            "device": platform.device_description()["device"], "wall_s": round(time.time() - started, 1)}


def kill_table(rows: list[dict]) -> str:
    lines = ["| bug | upstream | verdict | killed by (cells) | first message | device |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        first = (row["kills"][0]["message"] or "").replace("|", "\\|")[:160] if row["kills"] else row.get("why", "")
        lines.append(f"| {row['bug']} | {row['upstream']} | **{row['verdict']}** | "
                     f"{len(row['kills'])}/{row['executed']} | {first} | {row.get('device', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--bug", action="append", choices=sorted(SEED_BUGS), help="replay only these")
    parser.add_argument("-n", "--workers", type=cli.workers, default="auto")
    parser.add_argument("--out", type=cli.output_folder,
                        default=str(REPORTS_DIR / ("gpu" if platform.HAS_GPU else "cpu")))
    args = parser.parse_args(argv)
    rows = [replay(bug_id, args.workers) for bug_id in (args.bug or SEED_BUGS)]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "kill_table.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / "KILL_TABLE.md").write_text(kill_table(rows) + "\n")
    print(kill_table(rows))
    survivors = [row["bug"] for row in rows if row["verdict"] not in ("killed", "not run")]
    if survivors:
        print(f"\nNOT KILLED: {', '.join(survivors)}", file=sys.stderr)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
