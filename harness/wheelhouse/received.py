"""Which transferred files are on the runner intact, and which stages must be sent (again).

Shared by ``status`` (run after every stage, so that a runner lost and started afresh, with
an empty /tmp, shows at once) and ``install`` (which does nothing until every part is there).
Hashing the whole wheelhouse after each of 20-odd stages would cost more than the transfers,
so each file's sha256 is remembered with its size and mtime in ``.wheelhouse-checked.json``
beside the parts and computed again only when either changed (``cp`` gives every copy a new
mtime, so a file sent again is always checked again).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.wheelhouse.manifest import Manifest
from harness.wheelhouse.parts import sha256_file

CHECKED = ".wheelhouse-checked.json"


@dataclass(frozen=True)
class Received:
    manifest: Manifest
    problems: dict[str, str]  # file -> "missing", "incomplete (...)" or "corrupt (...)"

    @property
    def complete(self) -> bool:
        return not self.problems

    def stage_of(self, file: str) -> int:
        return next(stage.stage for stage in self.manifest.stages if file in stage.files)

    @property
    def stages_to_send(self) -> list[int]:
        return sorted({self.stage_of(file) for file in self.problems})


def _load_checked(parts_dir: Path) -> dict[str, list]:
    try:
        return json.loads((parts_dir / CHECKED).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def check(manifest: Manifest, parts_dir: Path) -> Received:
    """Compare every file the stages carry with the manifest (size, then sha256)."""
    checked = _load_checked(parts_dir)
    problems: dict[str, str] = {}
    for name, entry in manifest.transferred().items():
        path = parts_dir / name
        if not path.is_file():
            problems[name] = "missing"
            continue
        stat = path.stat()
        if stat.st_size != entry.size:
            problems[name] = f"incomplete ({stat.st_size} of {entry.size} bytes)"
            continue
        stamp = [stat.st_size, stat.st_mtime_ns]
        if checked.get(name, [None])[:2] != stamp:
            checked[name] = [*stamp, sha256_file(path)]
        if checked[name][2] != entry.sha256:
            problems[name] = "corrupt (sha256 differs from the manifest)"
    if parts_dir.is_dir():
        (parts_dir / CHECKED).write_text(json.dumps(checked))
    return Received(manifest, problems)


def ranges(numbers: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    spans: list[list[int]] = []
    for number in sorted(numbers):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def status_line(received: Received, parts_dir: Path) -> str:
    """One line a runner call prints after copying its stage."""
    total = len(received.manifest.stages)
    todo = received.stages_to_send
    here = [stage.stage for stage in received.manifest.stages if stage.stage not in todo]
    head = f"wheelhouse sglang {received.manifest.sglang} in {parts_dir}:"
    if not todo:
        return f"{head} all {total} stages here; ready to install"
    damaged = [f"{file} {problem}" for file, problem in received.problems.items() if problem != "missing"]
    return " ".join([f"{head} {len(here)} of {total} stages here ({ranges(here) or 'none'});",
                     f"still to send: {ranges(todo)}", *([f"(damaged: {'; '.join(damaged)})"] if damaged else [])])


def problem_report(received: Received, parts_dir: Path) -> str:
    """Every missing or damaged file with the stage that carries it, and what to do."""
    lines = [f"  {file}: {problem}; it travels in stage {received.stage_of(file)}"
             for file, problem in sorted(received.problems.items())]
    return "\n".join([f"not all parts are in {parts_dir}:", *lines,
                      f"send stage(s) {ranges(received.stages_to_send)} "
                      "(python -m harness.wheelhouse stage-plan), then run install again"])
