"""The version matrix: the same cells on several sglang releases, and where each one changed.

`python -m harness.session.versions run` builds one virtual environment per release from its lock file
(locks/sglang-<version>.txt, a full `pip freeze` installed with --no-deps, so every release runs
on exactly the stack it was measured on), runs the cell matrix in each, and writes
out/versions/: VERSIONS.md (cells x releases, and for each cell whose status changes, the
first release where it changed), versions.json (every cell's status on every release) and one
results.json per release under <release>/. `python -m harness record --section versions` copies
the two tables to reports/versions/; the per-release results stay out of git (1.5 MB each, and
the repository travels to the GPU runner within 64 MiB per call).
`python -m harness.session.versions report` re-renders the tables from the per-release results.

Environments live in the folder the user names (--venvs, default .venvs/, gitignored); they are
built with uv when it is installed (hard links from one cache: seven torch stacks cost one),
else with venv + pip.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness import ROOT
from harness.base.releases import KNOWN_RELEASES, version_key
from harness.reporting.cell_schema import ReportingError, load_results
from harness.reporting.markdown import markdown_table
from harness.base.results import OUTPUT_DIR, RUN_ID_ENV, run_folder

LOCKS = ROOT / "locks"
OUT = OUTPUT_DIR / "versions"
STAMP = ".attn-harness-lock"


class VersionMatrixError(RuntimeError):
    """A release cannot be set up or run; the message names the release and what to do."""


def lock_file(release: str) -> Path:
    path = LOCKS / f"sglang-{release}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem.removeprefix("sglang-") for p in LOCKS.glob("sglang-*.txt")))
        raise VersionMatrixError(f"release {release}: no lock file {path.relative_to(ROOT)}; locked: {known}")
    return path


def ensure_venv(release: str, venvs: Path) -> Path:
    """The release's environment, rebuilt only when its lock file changed."""
    lock = lock_file(release)
    venv = venvs / f"sglang-{release}"
    python = venv / "bin" / "python"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    stamp = venv / STAMP
    if stamp.is_file() and stamp.read_text() == digest:
        return python
    started = time.time()
    uv = shutil.which("uv")
    if uv:
        _check([uv, "venv", "-q", "--python", sys.executable, str(venv)], release)
        _check([uv, "pip", "install", "-q", "--python", str(python), "--no-deps", "--link-mode", "hardlink",
                "-r", str(lock)], release)
    else:
        _check([sys.executable, "-m", "venv", "--clear", str(venv)], release)
        _check([str(python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(lock)], release)
    stamp.write_text(digest)
    print(f"[versions] {release}: environment built in {time.time() - started:.0f} s", flush=True)
    return python


def _check(command: list[str], release: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise VersionMatrixError(f"release {release}: `{' '.join(command[:4])} ...` failed: {tail[0]}")


def run_release(release: str, python: Path, out: Path, workers: str, pytest_args: list[str]) -> dict:
    """Run the cells on one release; merge its cell lines into out/<release>/results.json."""
    run = f"versions-{release}-{int(time.time())}"
    env = {**os.environ, RUN_ID_ENV: run}
    started = time.time()
    subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
                    "harness/test_cases.py", *pytest_args], cwd=ROOT, env=env, check=False)
    target = out / release
    _check([str(python), "-m", "harness.reporting", "merge", str(run_folder(run)),
            "--out-dir", str(target)], release)
    return {"release": release, "wall_s": round(time.time() - started, 1)}


def status_table(per_release: dict[str, dict]) -> dict[str, dict[str, str]]:
    """cell_id -> release -> status ("absent" where a release did not collect the cell)."""
    table: dict[str, dict[str, str]] = {}
    for release, results in per_release.items():
        for cell in results["cells"]:
            table.setdefault(cell["cell_id"], {})[release] = cell["status"]
    return {cell_id: {r: row.get(r, "absent") for r in per_release} for cell_id, row in sorted(table.items())}


def first_change(row: dict[str, str]) -> str | None:
    """The first release (in release order) whose status differs from the release before it."""
    releases = list(row)
    return next((b for a, b in zip(releases, releases[1:]) if row[a] != row[b]), None)


def render(per_release: dict[str, dict]) -> tuple[str, dict]:
    table = status_table(per_release)
    releases = list(per_release)
    totals = []
    for release in releases:
        counts: dict[str, int] = {}
        for row in table.values():
            counts[row[release]] = counts.get(row[release], 0) + 1
        executed = sum(n for status, n in counts.items() if status not in ("skipped", "absent", "not_run"))
        totals.append([release, str(executed), *(str(counts.get(s, 0)) for s in
                                                  ("passed", "failed", "crashed", "skipped", "absent"))])
    changed = {cell_id: row for cell_id, row in table.items() if first_change(row)}
    lines = ["# Version matrix", "",
             f"The same cells on sglang {', '.join(releases)} (CPU, Triton interpreter). "
             f"{len(table)} cells; {len(changed)} change status between releases.", "",
             *markdown_table(["release", "executed", "passed", "failed", "crashed", "skipped", "absent"], totals),
             "", "## Cells whose status changes", ""]
    if changed:
        rows = [[f"`{cell_id}`", first_change(row), *(row[r] for r in releases)] for cell_id, row in changed.items()]
        lines += markdown_table(["cell", "first changed in", *releases], rows)
    else:
        lines.append("None: every cell has the same status on every release.")
    summary = {"releases": releases, "cells": len(table),
               "changed": {cell_id: {"first_changed_in": first_change(row), "statuses": row}
                           for cell_id, row in changed.items()},
               "statuses": {cell_id: [row[r] for r in releases] for cell_id, row in table.items()}}
    return "\n".join(lines) + "\n", summary


def load_recorded(out: Path, releases: list[str]) -> dict[str, dict]:
    per_release = {}
    for release in releases:
        path = out / release / "results.json"
        if not path.is_file():
            raise VersionMatrixError(f"release {release}: {path} is missing; run `python -m harness.session.versions run "
                                     f"--releases {release}` first")
        per_release[release] = load_results(path)
    return per_release


def write_reports(out: Path, per_release: dict[str, dict]) -> str:
    text, summary = render(per_release)
    (out / "VERSIONS.md").write_text(text, encoding="utf-8")
    (out / "versions.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return text


def parse_releases(text: str | None) -> list[str]:
    releases = [r.strip() for r in text.split(",") if r.strip()] if text else list(KNOWN_RELEASES)
    unknown = [r for r in releases if r not in KNOWN_RELEASES]
    if unknown:
        raise VersionMatrixError(f"--releases: unknown {', '.join(unknown)}; known: {', '.join(KNOWN_RELEASES)}")
    return sorted(releases, key=version_key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.session.versions", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "report"))
    parser.add_argument("--releases", help=f"comma-separated (default: all known: {', '.join(KNOWN_RELEASES)})")
    parser.add_argument("--venvs", type=Path, default=ROOT / ".venvs", help="where the environments live")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("-n", "--workers", default="auto")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --), e.g. -k triton")
    args = parser.parse_args(argv)
    try:
        releases = parse_releases(args.releases)
        args.out.mkdir(parents=True, exist_ok=True)
        if args.command == "run":
            for release in releases:
                python = ensure_venv(release, args.venvs)
                print(f"[versions] {release}: {run_release(release, python, args.out, args.workers, args.pytest_args)}",
                      flush=True)
        print(write_reports(args.out, load_recorded(args.out, releases)), end="")
    except (VersionMatrixError, ReportingError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
