"""Install the wheelhouse on the runner: check, reassemble, decompress, pip install.

Standard library only (plus the carried zstandard wheel), because the runner has nothing
of ours. Every step can be re-run: nothing starts until every part is there (a missing or
damaged part is named with the stage that carries it), wheels already unpacked and checked
are kept, and a target that already holds this archive's wheels is left alone unless
``--force`` is given. It ends by writing the environment file (PYTHONPATH, LD_LIBRARY_PATH)
that every later shell sources.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from harness.wheelhouse import received, sitepaths, zstd_boot
from harness.wheelhouse.manifest import MANIFEST_NAME, FileEntry, Manifest, WheelEntry
from harness.wheelhouse.parts import CHUNK, JoinedReader, sha256_file
from harness.wheelhouse.table import format_table, mib

MARKER = ".wheelhouse-installed"


def _intact(entry: FileEntry, path: Path) -> bool:
    return path.is_file() and path.stat().st_size == entry.size and sha256_file(path) == entry.sha256


def _write_checked(source, wheel: WheelEntry, work: Path) -> None:
    """Copy one archive member to ``work``, keeping it only if its sha256 matches."""
    partial = work / f"{wheel.file}.partial"
    digest = hashlib.sha256()
    with open(partial, "wb") as out:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != wheel.sha256:
        partial.unlink()
        raise RuntimeError(f"{wheel.file} unpacked with a sha256 that differs from the manifest; "
                           "the parts are from another build than the manifest")
    partial.replace(work / wheel.file)


def unpack(manifest: Manifest, parts_dir: Path, work: Path, zstandard) -> int:
    """Decompress the parts as one stream into ``work``; return how many wheels were written."""
    wanted = {wheel.file: wheel for wheel in manifest.wheels}
    todo = {name for name, wheel in wanted.items() if not _intact(wheel, work / name)}
    if not todo:
        return 0
    decompressor = zstandard.ZstdDecompressor(max_window_size=1 << manifest.zstd_window_log)
    seen = set()
    parts = [parts_dir / part.file for part in manifest.parts]
    with decompressor.stream_reader(JoinedReader(parts), read_size=CHUNK) as stream, \
            tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isfile() or member.name not in wanted:
                raise RuntimeError(f"unexpected archive member {member.name!r}: "
                                   "the parts are from another build than the manifest")
            seen.add(member.name)
            if member.name in todo:
                _write_checked(tar.extractfile(member), wanted[member.name], work)
    if seen != set(wanted):
        raise RuntimeError(f"the archive lacks {sorted(set(wanted) - seen)}")
    return len(todo)


def pip_install(wheels: list[Path], target: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--disable-pip-version-check", "--upgrade", "--target", str(target),
           *map(str, wheels)]
    result = subprocess.run(cmd)
    if result.returncode != 0:
        raise RuntimeError(f"pip install into {target} failed (exit {result.returncode}); "
                           "see pip's output above")


def compile_bytecode(target: Path) -> int:
    """Compile every module of the target once, on all cores; returns compileall's exit status.

    pip runs with --no-compile (it compiles one file at a time) and the GPU runner's image sets
    PYTHONDONTWRITEBYTECODE=1, so no process ever writes the bytecode it compiles: without this
    step every pytest worker compiled sglang, torch and transformers from source at import.
    Measured on the H200 (2026-11-26): 17,631 files in 8.9 s; sglang's import went from 16.4 s to
    10.3-11.1 s alone and from 20-27 s to 13-16 s in each of 16 workers at once
    (reports/gpu/BENCH.md). A module that does not compile (a test file in another Python's
    syntax) only keeps its source, so a non-zero status is reported, not fatal.
    """
    return subprocess.run([sys.executable, "-m", "compileall", "-qq", "-j", "0", str(target)]).returncode


def check_python(manifest: Manifest) -> None:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != manifest.python:
        raise RuntimeError(f"the wheels are built for Python {manifest.python}, this is {running} "
                           f"({sys.executable}); run install with the runner's python3")


def install(parts_dir: Path, target: Path, work: Path, force: bool) -> str:
    """Run every step that is not done yet; return the report to print."""
    start = time.monotonic()
    manifest = Manifest.read(parts_dir)
    check_python(manifest)
    marker = target / MARKER
    timings = []
    if force or not marker.is_file() or marker.read_text().strip() != manifest.archive.sha256:
        step = time.monotonic()
        arrived = received.check(manifest, parts_dir)
        if not arrived.complete:
            raise RuntimeError(received.problem_report(arrived, parts_dir))
        timings.append(["check sha256 of parts", f"{time.monotonic() - step:.1f} s"])

        step = time.monotonic()
        work.mkdir(parents=True, exist_ok=True)
        zstandard = zstd_boot.load(parts_dir / manifest.bootstrap.file, work / "_zstandard")
        written = unpack(manifest, parts_dir, work, zstandard)
        timings.append([f"decompress {written} wheels (zstandard {zstandard.__version__})",
                        f"{time.monotonic() - step:.1f} s"])

        step = time.monotonic()
        target.mkdir(parents=True, exist_ok=True)
        pip_install([work / wheel.file for wheel in manifest.wheels], target)
        shutil.copy2(parts_dir / MANIFEST_NAME, target / MANIFEST_NAME)  # for verify
        marker.write_text(manifest.archive.sha256 + "\n")
        shutil.rmtree(work)
        timings.append(["pip install --no-index --no-deps --target", f"{time.monotonic() - step:.1f} s"])
    else:
        timings.append([f"already installed ({marker} matches the manifest)", "0.0 s"])
    step = time.monotonic()
    status = compile_bytecode(target)  # also on a target an older installer left without bytecode
    timings.append(["compile bytecode (compileall, all cores)" + ("" if status == 0 else
                    f": exit {status}, some modules keep only their source"), f"{time.monotonic() - step:.1f} s"])

    env = sitepaths.environment(target)
    env_file = sitepaths.write_env_file(target, env)
    timings.append(["total", f"{time.monotonic() - start:.1f} s"])
    stored = sum(wheel.size for wheel in manifest.wheels)
    return "\n".join([
        f"sglang {manifest.sglang} wheelhouse: {len(manifest.wheels)} wheels ({mib(stored)} stored) "
        f"installed into {target} (the list: {target / MANIFEST_NAME})",
        format_table(["step", "time"], timings),
        "",
        f"Run this in every shell that uses them (or: . {env_file}):",
        *sitepaths.export_lines(env),
    ])
