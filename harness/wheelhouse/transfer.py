"""Move one stage at a time: what to copy here, and what to run on the runner.

Each runner call carries the working tree plus the folders named in ``carry``, at most
64 MiB together, and what it leaves under /tmp stays there while the runner is warm. So a
stage is: put its files (and only its files) into the carried folder, then, on the runner,
copy them to a folder under /tmp; after the last stage, install and verify there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.wheelhouse.manifest import Manifest
from harness.wheelhouse.table import format_table, mib

RUNNER_PARTS = "/tmp/wheelhouse-parts"
RUNNER_TARGET = "/tmp/site"


def runner_command(manifest: Manifest, number: int, carry: str) -> str:
    command = f"mkdir -p {RUNNER_PARTS} && cp {carry}/* {RUNNER_PARTS}/"
    if number == len(manifest.stages):
        command += (f" && python3 -m harness.wheelhouse install --parts {RUNNER_PARTS} "
                    f"--target {RUNNER_TARGET} && python3 -m harness.wheelhouse verify "
                    f"--target {RUNNER_TARGET}")
    return command


def plan_text(manifest: Manifest, parts_dir: Path, carry: str) -> str:
    rows = [[stage.stage, mib(stage.size), " ".join(stage.files)] for stage in manifest.stages]
    lines = [
        format_table(["stage", "size", "files"], rows),
        "",
        f"{len(manifest.stages)} transfers of at most {mib(manifest.transfer_budget)} "
        "(plus the repository itself, 64 MiB in all).",
        "Run the stages back to back: /tmp on the runner lasts only while it stays warm.",
        "",
    ]
    for stage in manifest.stages:
        lines += [
            f"stage {stage.stage}:",
            f"  here:   python -m harness.wheelhouse stage {stage.stage} --parts {parts_dir} --into {carry}",
            f"  runner: (carry {carry}) {runner_command(manifest, stage.stage, carry)}",
        ]
    return "\n".join(lines)


def copy_stage(manifest: Manifest, parts_dir: Path, number: int, into: Path) -> list[Path]:
    """Empty ``into`` of any wheelhouse file, then copy stage ``number``'s files there."""
    by_number = {stage.stage: stage for stage in manifest.stages}
    if number not in by_number:
        raise ValueError(f"no stage {number}: the manifest has stages 1..{len(manifest.stages)}")
    into.mkdir(parents=True, exist_ok=True)
    for stage in manifest.stages:
        for file in stage.files:
            (into / file).unlink(missing_ok=True)
    copied = []
    for file in by_number[number].files:
        source = parts_dir / file
        if not source.is_file():
            raise FileNotFoundError(f"{source} not found: was the wheelhouse built into {parts_dir}?")
        copied.append(Path(shutil.copy2(source, into / file)))
    return copied
