"""Build the wheelhouse on an internet-connected x86-64 machine.

Download every pin for the runner's Python, re-zip each wheel uncompressed (slimming
sglang-kernel), pack them all into one tar, compress it with zstd at level 19 with a 2 GiB
window and long-distance matching, and split it into numbered parts. One solid stream beats
per-wheel compression because the big libraries repeat across wheels (the cu12 and cu13
flavours of the CuTe DSL compress to 75 MiB together against 55 MiB for cu13 alone); the
runner needs every part anyway. The zstandard wheel travels beside the parts, to bootstrap.
"""

from __future__ import annotations

import shutil
import tarfile
import time
import zipfile
from pathlib import Path

import zstandard

from harness.wheelhouse import fetch, repack, stages
from harness.wheelhouse.manifest import MANIFEST_NAME, FileEntry, Manifest, WheelEntry
from harness.wheelhouse.parts import PartWriter, sha256_file
from harness.wheelhouse.pins import PINS_FILE, Pin, read_pins
from harness.wheelhouse.table import format_table, mib

ARCHIVE_NAME = "wheelhouse.tar.zst"
BOOTSTRAP = "zstandard"
MB = 1000 * 1000


def _split_bootstrap(pins: list[Pin]) -> tuple[Pin, list[Pin]]:
    boot = [pin for pin in pins if pin.key == BOOTSTRAP]
    if not boot:
        raise ValueError(f"the pins must include {BOOTSTRAP}: the runner needs it to decompress")
    return boot[0], [pin for pin in pins if pin.key != BOOTSTRAP]


def _clean_outputs(out: Path) -> None:
    """Remove what an earlier build left, so no stale part or wheel is staged by mistake."""
    for stale in [*out.glob(f"{ARCHIVE_NAME}.*"), *out.glob(f"{BOOTSTRAP}-*.whl"), out / MANIFEST_NAME]:
        stale.unlink(missing_ok=True)


def _reset_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def _compress(wheels: list[Path], out: Path, part_bytes: int, level: int, window_log: int) -> PartWriter:
    params = zstandard.ZstdCompressionParameters.from_level(
        level, window_log=window_log, enable_ldm=True, threads=-1)
    compressor = zstandard.ZstdCompressor(compression_params=params)
    with PartWriter(out, ARCHIVE_NAME, part_bytes) as writer, \
            compressor.stream_writer(writer, closefd=False) as zstd_out, \
            tarfile.open(fileobj=zstd_out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=wheel.name, filter=_reset_owner)
    return writer


def build(out: Path, part_mb: float, transfer_mib: float, level: int, window_log: int,
          pins_file: Path = PINS_FILE) -> Manifest:
    start = time.monotonic()
    budget, part_bytes = int(transfer_mib * stages.MIB), int(part_mb * MB)
    stages.check_fits(part_bytes, budget, f"--part-mb {part_mb:g}", "use a smaller --part-mb")
    out.mkdir(parents=True, exist_ok=True)
    cache = out / ".cache"
    boot_pin, pins = _split_bootstrap(read_pins(pins_file))

    downloaded = fetch.download([boot_pin, *pins], cache / "downloads")
    print(f"[build] downloaded {len(downloaded)} wheels in {time.monotonic() - start:.0f} s")

    step = time.monotonic()
    shutil.rmtree(cache / "stored", ignore_errors=True)
    wheels: list[WheelEntry] = []
    stored_paths: list[Path] = []
    for pin in sorted(pins, key=lambda p: p.key):
        stored, note = repack.rezip(pin, downloaded[pin], cache / "stored")
        stored_paths.append(stored)
        wheels.append(WheelEntry(stored.name, stored.stat().st_size, sha256_file(stored), str(pin), pin.why, note))
    stored_total = sum(wheel.size for wheel in wheels)
    print(f"[build] re-zipped {len(wheels)} wheels uncompressed ({mib(stored_total)}) "
          f"in {time.monotonic() - step:.0f} s")

    step = time.monotonic()
    _clean_outputs(out)
    writer = _compress(stored_paths, out, part_bytes, level, window_log)
    print(f"[build] zstd -{level} window 2^{window_log}: {mib(stored_total)} -> {mib(writer.size)} "
          f"in {time.monotonic() - step:.0f} s")

    boot, boot_note = repack.rezip(boot_pin, downloaded[boot_pin], out, zipfile.ZIP_DEFLATED)
    bootstrap = WheelEntry(boot.name, boot.stat().st_size, sha256_file(boot), str(boot_pin),
                           boot_pin.why, f"travels as a plain wheel; {boot_note}")
    parts = [FileEntry(part.path.name, part.size, part.sha256) for part in writer.parts]
    manifest = Manifest(
        python=fetch.RUNNER_PYTHON, zstd_level=level, zstd_window_log=window_log, transfer_budget=budget,
        bootstrap=bootstrap, archive=FileEntry(ARCHIVE_NAME, writer.size, writer.sha256),
        parts=parts, wheels=wheels, stages=stages.plan(parts, bootstrap, budget),
        build_seconds=round(time.monotonic() - start, 1))
    manifest.write(out)
    return manifest


def report(manifest: Manifest, out: Path) -> str:
    """The build table (part, size, stage) and the totals a runner owner plans with."""
    sizes = {entry.file: entry.size for entry in [*manifest.parts, manifest.bootstrap]}
    sizes[MANIFEST_NAME] = (out / MANIFEST_NAME).stat().st_size
    rows = [[file, mib(sizes[file]), stage.stage] for stage in manifest.stages for file in stage.files]
    total = sum(sizes.values())
    slimmed = [f"  {wheel.pin}: {wheel.note}" for wheel in [*manifest.wheels, manifest.bootstrap] if wheel.note]
    return "\n".join([
        format_table(["part", "size", "stage"], rows),
        "",
        f"{len(manifest.wheels)} wheels + bootstrap {manifest.bootstrap.pin}; "
        f"{len(manifest.parts)} parts; {mib(total)} to transfer in {len(manifest.stages)} transfers "
        f"of at most {mib(manifest.transfer_budget)}; built in {manifest.build_seconds:.0f} s",
        "notes:", *slimmed,
    ])
