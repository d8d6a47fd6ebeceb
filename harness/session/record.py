"""`python -m harness record --section cpu`: a run's outputs become the recorded results.

Commands write under out/ (harness/base/results.py), so running never dirties the checkout. The
results the README and docs show are tracked under reports/<section>/ and change only here, on
purpose: RECORDED says, per section, which outputs are kept and which command writes each. A
file is copied when the run folder has it; recorded files the run did not write again stay as
they were (a matrix run leaves the recorded kill table alone). When a results.json is recorded,
the section's matrix on docs/results.md is regenerated from it, so the page and the recorded
results cannot drift apart (CI checks that with `readme-matrix --check`).
"""

from __future__ import annotations

import gzip
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.reporting.cell_schema import load_results
from harness.reporting.readme_matrix import MATRIX_PAGE, SECTIONS, page_with_matrix
from harness.base.results import RECORDED_DIR, partial_because


@dataclass(frozen=True)
class Kept:
    """Files of a run folder that are recorded: a glob relative to the folder, and who writes them.
    ``compressed`` files are recorded gzip-compressed (name + .gz): results.json is 1 to 5 MB of
    repetitive JSON a clone and every GPU transfer would carry, and 25 to 35 times smaller compressed;
    every report reads either form (harness/reporting/cell_schema.py load_results)."""

    pattern: str
    written_by: str
    compressed: bool = False


RUN = "python -m harness run"
REPLAY = "python -m harness.bugs.replay"
PER_MACHINE = (
    Kept("results.json", RUN, compressed=True),  # junit.xml is not kept: merge writes it again from these
    Kept("SUMMARY.md", RUN),
    Kept("matrix.png", RUN),
    Kept("COVERAGE.md", RUN),
    Kept("KILL_TABLE.md", REPLAY),
    Kept("kill_table.json", REPLAY),
    Kept("GENERATED_KILL_TABLE.md", f"{REPLAY} --generated N"),
    Kept("generated_kill_table.json", f"{REPLAY} --generated N"),
    Kept("BENCH.md", "python -m harness.speed.bench"),
    Kept("BENCH.json", "python -m harness.speed.bench"),
    Kept("reproducers/*.yaml", "pytest --generated N (a failing generated cell, shrunk)"),
)
RECORDED: dict[str, tuple[Kept, ...]] = {
    "cpu": PER_MACHINE,
    "gpu": PER_MACHINE,
    "gpu-mla": PER_MACHINE,  # the MLA family's GPU rows, run apart (-k mla) while their triage goes on
    "versions": (Kept("VERSIONS.md", "python -m harness.session.versions run"),
                 Kept("versions.json", "python -m harness.session.versions run")),
}
RESULTS = "results.json"
RECORDED_RESULTS = "results.json.gz"  # RESULTS as record keeps it


class NothingToRecord(Exception):
    """The run folder holds none of the files its section keeps; the message says what would."""


class PartOverWhole(NothingToRecord):
    """The run covered a part of the matrix, and the recorded results a whole one: recording would
    replace the whole matrix with the part. The message says how to do it on purpose."""


def _refuse_part_over_whole(section: str, source: Path, target: Path) -> None:
    """Raise PartOverWhole when `source`'s results are a part of the matrix and `target`'s the whole."""
    if not (source / RESULTS).is_file() or not (target / RECORDED_RESULTS).is_file():
        return
    part = partial_because(load_results(source / RESULTS)["runs"])
    if part and partial_because(load_results(target / RECORDED_RESULTS)["runs"]) is None:
        raise PartOverWhole(f"{source}: not recorded: {part}, and {target} holds a run of the whole matrix, which it "
                            f"would replace; to record it anyway: python -m harness record --section {section} "
                            f"--from {source} --partial")


def record(section: str, source: Path, recorded: Path = RECORDED_DIR, page: Path = MATRIX_PAGE,
           partial: bool = False) -> list[Path]:
    """Copy the section's kept files from `source` into `recorded`/<section>/; return what was written.
    A run of a part of the matrix does not replace a recorded whole one unless ``partial`` says so."""
    target = recorded / section
    if not partial:
        _refuse_part_over_whole(section, source, target)
    found = [(path, kept) for kept in RECORDED[section] for path in sorted(source.glob(kept.pattern))
             if path.is_file()]
    if not found:
        expected = "; ".join(f"{kept.pattern} ({kept.written_by})" for kept in RECORDED[section])
        raise NothingToRecord(f"{source}: nothing to record for section {section}; it keeps {expected}")
    written = []
    for path, kept in found:
        copy = target / path.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if kept.compressed:
            copy = copy.with_name(copy.name + ".gz")
            copy.write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))  # mtime 0: same run, same bytes
        else:
            shutil.copyfile(path, copy)
        written.append(copy)
    if section in SECTIONS and (source / RESULTS).is_file():
        current, expected = page_with_matrix(page, load_results(target / RECORDED_RESULTS), section)
        if expected != current:
            page.write_text(expected, encoding="utf-8")
            written.append(page)
    return written
