"""Move one stage at a time: what to copy here, and what to run on the runner.

Each runner call carries the working tree plus the folders named in ``carry``, at most
64 MiB together, and what it leaves under /tmp stays there only while the runner is warm.
So a stage is: put its files and the manifest (and nothing else) into the carried folder,
then, on the runner, copy them to /tmp/whparts and print which stages are there. After the
last stage, install and verify there. If the runner was lost in between, the status line
names the stages to send again; ``install`` refuses until they are there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from harness.wheelhouse.manifest import MANIFEST_NAME, Manifest, wheelhouse_files
from harness.wheelhouse.stages import MIB
from harness.wheelhouse.table import format_table, mib

RUNNER_PARTS = "/tmp/whparts"
RUNNER_TARGET = "/tmp/attn-site"  # .ci/nightly-gpu's default ATTN_SITE, so it finds the install done
CALL_LIMIT = 64 * MIB  # working tree + carried folders, per runner call


def copy_command(carry: str) -> str:
    return f"mkdir -p {RUNNER_PARTS} && cp {carry}/* {RUNNER_PARTS}/"


def stage_command(carry: str) -> str:
    """The runner command of every stage but the last: copy, then say what is there."""
    return f"{copy_command(carry)} && python3 -m harness.wheelhouse status --parts {RUNNER_PARTS}"


def install_command() -> str:
    return (f"python3 -m harness.wheelhouse install --parts {RUNNER_PARTS} --target {RUNNER_TARGET} "
            f"&& python3 -m harness.wheelhouse verify --target {RUNNER_TARGET}")


def runner_command(manifest: Manifest, number: int, carry: str) -> str:
    if number == len(manifest.stages):
        return f"{copy_command(carry)} && {install_command()}"
    return stage_command(carry)


def plan_text(manifest: Manifest, parts_dir: Path, carry: str) -> str:
    manifest_size = (parts_dir / MANIFEST_NAME).stat().st_size
    rows = [[stage.stage, mib(stage.size + manifest_size), " ".join(stage.files)] for stage in manifest.stages]
    last = len(manifest.stages)
    return "\n".join([
        format_table(["stage", "size", "files (+ the manifest)"], rows),
        "",
        f"sglang {manifest.sglang}: {last} runner calls of at most {mib(manifest.transfer_budget)} "
        f"(plus the working tree, {CALL_LIMIT // MIB} MiB in all). Run them back to back: /tmp on the "
        "runner lasts only while it stays warm.",
        "",
        "For each stage N, here (from the repository root):",
        f"  python -m harness.wheelhouse stage N --parts {parts_dir} --into {carry}",
        f"then one runner call with carry [\"{carry}\"] and the command",
        f"  stages 1-{last - 1}:  {stage_command(carry)}" if last > 1 else "",
        f"  stage {last}:  {runner_command(manifest, last, carry)}",
        "",
        "Each status line names the stages still to send; a runner lost and started afresh shows",
        "earlier stages missing: send those again (same two steps), then run on the runner:",
        f"  {install_command()}",
        f"Later calls use the install with: . {RUNNER_TARGET}/wheelhouse-env.sh",
    ])


def working_tree_bytes(repo: Path) -> int | None:
    """Bytes a runner call sends as the working tree (tracked and untracked, not ignored), or None outside git."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=repo, capture_output=True)
    if listed.returncode != 0:
        return None
    paths = [repo / os.fsdecode(name) for name in listed.stdout.split(b"\0") if name]
    return sum(path.stat().st_size for path in paths if path.is_file())


def check_call_size(stage_bytes: int, tree_bytes: int | None, number: int) -> None:
    """Raise ValueError if the stage and the working tree together pass the per-call limit."""
    if tree_bytes is not None and stage_bytes + tree_bytes > CALL_LIMIT:
        raise ValueError(f"stage {number}: {mib(stage_bytes)} + the working tree's {mib(tree_bytes)} "
                         f"is over the {CALL_LIMIT // MIB} MiB a runner call carries; make the tree smaller "
                         "or rebuild with a smaller --transfer-mib")


def copy_stage(manifest: Manifest, parts_dir: Path, number: int, into: Path) -> list[Path]:
    """Empty ``into`` of any wheelhouse file (of any build), then copy stage ``number``'s files and the manifest."""
    by_number = {stage.stage: stage for stage in manifest.stages}
    if number not in by_number:
        raise ValueError(f"no stage {number}: the manifest has stages 1..{len(manifest.stages)}")
    into.mkdir(parents=True, exist_ok=True)
    for stale in wheelhouse_files(into):
        stale.unlink()
    copied = []
    for file in [MANIFEST_NAME, *by_number[number].files]:
        source = parts_dir / file
        if not source.is_file():
            raise FileNotFoundError(f"{source} not found: was the wheelhouse built into {parts_dir}?")
        copied.append(Path(shutil.copy2(source, into / file)))
    return copied
