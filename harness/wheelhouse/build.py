"""Build the wheelhouse of one sglang release on an internet-connected x86-64 machine.

Download every pin for the runner's Python, re-zip each wheel uncompressed (slimming the
ones with rules in repack.py), pack them all into one tar, compress it with a fast zstd level
and a 2 GiB window with long-distance matching, and split it into numbered parts that each
fill one transfer next to the manifest. One solid stream with a long window, because the big
libraries repeat code within themselves (the FA3 library: 326 MiB deflated, 159 MiB at
level 3) and across wheels; a fast level, because level 19 took 12 minutes of a 2-core
machine for a few percent more (RUNBOOK.md has the measurements). The zstandard wheel
travels beside the parts, to bootstrap.
"""

from __future__ import annotations

import shutil
import tarfile
import time
import zipfile
from pathlib import Path

import zstandard

from harness.wheelhouse import fetch, repack, stages
from harness.wheelhouse.manifest import (ARCHIVE_NAME, BOOTSTRAP, MANIFEST_NAME, FileEntry, Manifest, WheelEntry,
                                         wheelhouse_files)
from harness.wheelhouse.parts import PartWriter, sha256_file
from harness.wheelhouse.pins import Pin, read_release
from harness.wheelhouse.table import format_table, mib


def _split_bootstrap(pins: list[Pin]) -> tuple[Pin, list[Pin]]:
    boot = [pin for pin in pins if pin.key == BOOTSTRAP]
    if not boot:
        raise ValueError(f"the pins must include {BOOTSTRAP}: the runner needs it to decompress")
    return boot[0], [pin for pin in pins if pin.key != BOOTSTRAP]


def _reset_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def compress(wheels: list[Path], out: Path, part_bytes: int, level: int, window_log: int) -> PartWriter:
    """Tar ``wheels`` into one zstd stream written as ``out/wheelhouse.tar.zst.NNN`` parts."""
    params = zstandard.ZstdCompressionParameters.from_level(
        level, window_log=window_log, enable_ldm=True, threads=-1)
    compressor = zstandard.ZstdCompressor(compression_params=params)
    with PartWriter(out, ARCHIVE_NAME, part_bytes) as writer, \
            compressor.stream_writer(writer, closefd=False) as zstd_out, \
            tarfile.open(fileobj=zstd_out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=wheel.name, filter=_reset_owner)
    return writer


def build(out: Path, release: str, transfer_mib: float, level: int, window_log: int) -> Manifest:
    start = time.monotonic()
    budget = int(transfer_mib * stages.MIB)
    part_bytes = stages.part_bytes(budget)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / ".cache"
    boot_pin, pins = _split_bootstrap(read_release(release))
    timings: dict[str, float] = {}

    downloaded = fetch.download([boot_pin, *pins], cache / "downloads")
    timings["download"] = time.monotonic() - start
    print(f"[build] sglang {release}: {len(downloaded)} wheels downloaded in {timings['download']:.0f} s")

    step = time.monotonic()
    shutil.rmtree(cache / "stored", ignore_errors=True)
    wheels: list[WheelEntry] = []
    stored_paths: list[Path] = []
    for pin in sorted(pins, key=lambda p: p.key):
        stored, note = repack.rezip(pin, downloaded[pin], cache / "stored")
        stored_paths.append(stored)
        wheels.append(WheelEntry(stored.name, stored.stat().st_size, sha256_file(stored), str(pin), pin.why, note))
    stored_total = sum(wheel.size for wheel in wheels)
    timings["re-zip"] = time.monotonic() - step
    print(f"[build] re-zipped {len(wheels)} wheels uncompressed ({mib(stored_total)}) in {timings['re-zip']:.0f} s")

    step = time.monotonic()
    for stale in wheelhouse_files(out):  # an earlier build's, so none is staged by mistake
        stale.unlink()
    writer = compress(stored_paths, out, part_bytes, level, window_log)
    shutil.rmtree(cache / "stored")  # 4 GB for 0.5.23, and every build makes them afresh
    timings["compress"] = time.monotonic() - step
    print(f"[build] zstd -{level} window 2^{window_log}: {mib(stored_total)} -> {mib(writer.size)} "
          f"in {timings['compress']:.0f} s")

    boot, boot_note = repack.rezip(boot_pin, downloaded[boot_pin], out, zipfile.ZIP_DEFLATED)
    bootstrap = WheelEntry(boot.name, boot.stat().st_size, sha256_file(boot), str(boot_pin),
                           boot_pin.why, f"travels as a plain wheel; {boot_note}")
    parts = [FileEntry(part.path.name, part.size, part.sha256) for part in writer.parts]
    manifest = Manifest(
        sglang=release, python=fetch.RUNNER_PYTHON, zstd_level=level, zstd_window_log=window_log,
        transfer_budget=budget, bootstrap=bootstrap, archive=FileEntry(ARCHIVE_NAME, writer.size, writer.sha256),
        parts=parts, wheels=wheels, stages=stages.plan([*parts, bootstrap], budget),
        build_seconds=round(time.monotonic() - start, 1))
    manifest.write(out)
    print("[build] " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()))
    return manifest


def report(manifest: Manifest, out: Path) -> str:
    """The build table (stage, files, size) and the totals a runner owner plans with."""
    manifest_size = (out / MANIFEST_NAME).stat().st_size
    rows = [[stage.stage, " ".join(stage.files), mib(stage.size + manifest_size)] for stage in manifest.stages]
    total = sum(entry.size for entry in manifest.transferred().values()) + manifest_size * len(manifest.stages)
    unpacked = sum(wheel.size for wheel in manifest.wheels)
    notes = [f"  {wheel.pin}: {wheel.note}" for wheel in [*manifest.wheels, manifest.bootstrap] if wheel.note]
    return "\n".join([
        format_table(["stage", "files (+ manifest)", "size"], rows),
        "",
        f"sglang {manifest.sglang}: {len(manifest.wheels)} wheels ({mib(unpacked)} stored) + bootstrap "
        f"{manifest.bootstrap.pin}; zstd -{manifest.zstd_level}: {len(manifest.parts)} parts; {mib(total)} to "
        f"transfer in {len(manifest.stages)} transfers of at most {mib(manifest.transfer_budget)}; "
        f"built in {manifest.build_seconds:.0f} s",
        "slimmed:", *notes,
    ])
