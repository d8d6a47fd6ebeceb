"""Seed-bug replay runs and the kill table: `python -m harness.bugs.replay [--bug ID ...]`.

For each replayed bug, run the part of the matrix that should catch it with the
bug injected, and report which cells killed it and with what message. A bug no
cell kills has survived, and the command fails. A clean run of the same cells
(no bug) must pass, so a kill means the bug, not a broken harness.

The reverse for a fix (`--fix ID`): its cells run on the installed sglang, where at least one
must fail (the bug is there), then with the fix applied, where every one must pass; a fix that
leaves a cell failing, or finds no failing cell to fix, fails the command (FIX_TABLE.md).

With --generated N the hand-made cases are switched off and every bug meets
the same N generated cells (seed --seed), none chosen for it: the table says
what the generated tier kills alone, and with what budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from harness import ROOT
from harness.base import cli, platform
from harness.base.results import OUTPUT_DIR, RUN_ID_ENV, SECTION, run_folder
from harness.bugs.seed_bugs import FIXES, SEED_BUGS

KILLING = ("failed", "crashed")


@dataclass(frozen=True)
class Tier:
    """The cells a replay runs: the hand-made matrix part a bug names, or the generated tier alone."""

    pytest_args: tuple[str, ...] = ()
    budget: dict | None = None  # the generated tier's N and seed; None for the hand-made cases

    def selector(self, bug) -> str | None:
        return None if self.budget else bug.cells


def _run(bug_id: str | None, selector: str | None, workers: str, tier: Tier, option: str = "--replay") -> list[dict]:
    """Run the selected cells (optionally with a bug injected, or a fix applied: ``option``); return
    their result lines."""
    run = f"{option.strip('-')}-{bug_id or 'clean'}-{int(time.time())}"
    # A crash under an injected bug kills it as a failure does, and the clean run proves the cells sound:
    # no crashed cell is re-run alone to confirm it (each lone run is a process start; 21 crashes of
    # sglang#26753's replay on 0.5.17 took 694 s with them)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
               "harness/test_cases.py", *(["-k", selector] if selector else []), "--confirm-crashes", "0",
               *tier.pytest_args]
    if bug_id:
        command += [option, bug_id]
    done = subprocess.run(command, env={**os.environ, RUN_ID_ENV: run}, cwd=ROOT,
                          capture_output=True, text=True, check=False)
    if done.returncode in (3, 4):  # internal or usage error: the patch itself did not apply
        tail = (done.stderr + done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"{option} {bug_id or 'clean'} could not run: {' / '.join(tail)}")
    folder = run_folder(run)
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]


def _contract_results(bug_id: str | None, selector: str) -> list[dict]:
    """The host-mirror contract tests are plain tests: read their outcome from pytest."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "harness/fixtures/test_host_mirror_contract.py", "-k", selector, "-rfE"]
    if bug_id:
        command += ["--replay", bug_id]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    return [{"cell_id": line.split("::")[-1].split(" ")[0], "status": "failed",
             "reason": line.partition(" - ")[2][:300]} for line in failed]


def _cells_and_contract(bug_id: str | None, selector: str | None, workers: str, tier: Tier) -> list[dict]:
    contract = _contract_results(bug_id, selector) if selector else []  # hand-made tests only
    return _run(bug_id, selector, workers, tier) + contract


def replay(bug_id: str, workers: str, tier: Tier = Tier(), clean_runs: dict | None = None) -> dict:
    """One bug's row; ``clean_runs`` keeps clean runs by selector for bugs that share their cells."""
    bug = SEED_BUGS[bug_id]
    started = time.time()
    selector = tier.selector(bug)
    injected = _cells_and_contract(bug_id, selector, workers, tier)
    wall = time.time() - started
    clean_runs = {} if clean_runs is None else clean_runs
    if selector not in clean_runs:
        clean_runs[selector] = _cells_and_contract(None, selector, workers, tier)
    clean = clean_runs[selector]
    executed = [r for r in injected if r["status"] != "skipped"]
    kills = [{"cell": r["cell_id"], "status": r["status"], "message": r.get("reason")}
             for r in executed if r["status"] in KILLING]
    false_kills = [r["cell_id"] for r in clean if r["status"] in KILLING]
    verdict = "killed" if kills and not false_kills else "survived" if not false_kills else "harness broken"
    return {"bug": bug_id, "upstream": bug.upstream, "summary": bug.summary, "verdict": verdict,
            "kills": kills, "executed": len(executed), "false_kills": false_kills,
            "device": platform.device_description()["device"], "budget": tier.budget,
            "wall_s": round(wall, 1)}


STILL_FAILING = ("failed", "crashed", "xfailed", "xpassed", "not_run")  # anything but passed or skipped


def _failure(record: dict) -> dict:
    """What a known-failure signature is written from: the class, the error and the message."""
    return {"cell": record["cell_id"], "status": record["status"], "failure_class": record.get("failure_class"),
            "max_abs_err": record.get("max_abs_err"), "message": record.get("reason")}


def fix_row(fix_id: str, workers: str) -> dict:
    """One fix's row: its cells stock (some must fail, as known failures or not) and fixed (all must pass)."""
    fix = FIXES[fix_id]
    started = time.time()
    stock = [r for r in _run(None, fix.cells, workers, Tier()) if r["status"] != "skipped"]
    fixed = [r for r in _run(fix_id, fix.cells, workers, Tier(), "--apply-fix") if r["status"] != "skipped"]
    failing = [r for r in stock if r["status"] in STILL_FAILING]
    left = [_failure(r) for r in fixed if r["status"] in STILL_FAILING]
    verdict = ("not run" if not fixed else "fixed" if failing and not left
               else "nothing to fix" if not failing else "not fixed")
    return {"fix": fix_id, "upstream": fix.upstream, "summary": fix.summary, "verdict": verdict,
            "failing_stock": [_failure(r) for r in failing], "failing_fixed": left, "executed": len(fixed),
            "device": platform.device_description()["device"], "wall_s": round(time.time() - started, 1)}


def fix_table(rows: list[dict]) -> str:
    lines = ["| fix | upstream | verdict | failing stock (cells) | failing with the fix | first message (fixed, else stock) | device |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        first = ((row["failing_fixed"] or row["failing_stock"] or [{}])[0].get("message") or "").replace("|", "\\|")
        lines.append(f"| {row['fix']} | {row['upstream']} | **{row['verdict']}** | "
                     f"{len(row['failing_stock'])}/{row['executed']} | {len(row['failing_fixed'])} | "
                     f"{first[:160]} | {row['device']} |")
    return "\n".join(lines)


def _budget(row: dict) -> str:
    budget = row.get("budget")
    return f"{budget['generated']} generated, seed {budget['seed']}, {row.get('wall_s', '?')} s" if budget else ""


def kill_table(rows: list[dict]) -> str:
    generated = any(row.get("budget") for row in rows)
    lines = ["| bug | upstream | verdict | killed by (cells) | first message | device |"
             + (" budget (cells, seed, wall) |" if generated else ""),
             "| --- | --- | --- | --- | --- | --- |" + (" --- |" if generated else "")]
    for row in rows:
        first = (row["kills"][0]["message"] or "").replace("|", "\\|")[:160] if row["kills"] else row.get("why", "")
        lines.append(f"| {row['bug']} | {row['upstream']} | **{row['verdict']}** | "
                     f"{len(row['kills'])}/{row['executed']} | {first} | {row.get('device', '')} |"
                     + (f" {_budget(row)} |" if generated else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.bugs.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--bug", action="append", choices=sorted(SEED_BUGS), help="replay only these")
    parser.add_argument("-n", "--workers", type=cli.workers, default="auto")
    parser.add_argument("--out", type=cli.output_folder,
                        default=str(OUTPUT_DIR / SECTION))
    parser.add_argument("--generated", type=int, default=0, metavar="N",
                        help="replay against N generated cells alone (hand-made cases off)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated cells")
    parser.add_argument("--fix", action="append", choices=sorted(FIXES),
                        help="check these fixes instead of replaying bugs: their cells fail stock and pass fixed")
    args = parser.parse_args(argv)
    if args.fix:
        return _check_fixes(args.fix, args.workers, args.out)
    tier = (Tier(("--generated", str(args.generated), "--generated-seed", str(args.seed), "--generated-only",
                  "--shrink-max", "0"), {"generated": args.generated, "seed": args.seed})
            if args.generated else Tier())
    clean_runs: dict = {}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    name = "generated_kill_table" if args.generated else "kill_table"
    rows: list[dict] = []
    for bug_id in args.bug or SEED_BUGS:
        rows.append(replay(bug_id, args.workers, tier, clean_runs))
        # after each row: a replay cut short (a capped GPU call) keeps the rows it finished
        (out / f"{name}.json").write_text(json.dumps(rows, indent=2) + "\n")
        (out / f"{name.upper()}.md").write_text(kill_table(rows) + "\n")
        print(f"replayed {bug_id}: {rows[-1]['verdict']} ({rows[-1]['wall_s']} s)", flush=True)
    print(kill_table(rows))
    survivors = [row["bug"] for row in rows if row["verdict"] not in ("killed", "not run")]
    if survivors:
        print(f"\nNOT KILLED: {', '.join(survivors)}", file=sys.stderr)
    return 1 if survivors else 0


def _check_fixes(fix_ids: list[str], workers: str, out) -> int:
    rows = [fix_row(fix_id, workers) for fix_id in fix_ids]
    out.mkdir(parents=True, exist_ok=True)
    (out / "fix_table.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / "FIX_TABLE.md").write_text(fix_table(rows) + "\n")
    print(fix_table(rows))
    unfixed = [row["fix"] for row in rows if row["verdict"] not in ("fixed", "not run")]
    if unfixed:
        print(f"\nNOT FIXED: {', '.join(unfixed)}", file=sys.stderr)
    return 1 if unfixed else 0


if __name__ == "__main__":
    sys.exit(main())
