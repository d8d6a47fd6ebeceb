"""Re-zip wheels: uncompressed for the archive, and without files the runner never loads.

A wheel is a deflate zip; zstd cannot squeeze deflated bytes much further (the 83 MB
nvidia-cutlass-dsl-libs-cu13 wheel stays 83 MB), but the same files stored uncompressed go
from 213 MiB to 55 MiB under zstd -19 with a 2 GiB window, and identical libraries in
different wheels (the cu12 and cu13 flavours of the CuTe DSL) compress against each other.
A stored zip is still a valid wheel, so pip installs it as it is.

sglang-kernel 0.4.5 loads ``sm90/common_ops`` on compute capability 9.0 and ``sm100/`` on
anything else (Blackwell, or no GPU at all), and loads ``infllm_ops`` only from
``sgl_kernel.infllm_v2``, which sglang 0.5.17 never calls. The Hopper runner needs neither.

The zstandard wheel travels on its own, still deflated (nothing on the runner could undo
zstd yet), and CPython only ever imports its C backend, so its CFFI backend stays behind:
5.3 MiB become about 2.5 MiB, small enough to ride along with a full part.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from harness.wheelhouse.pins import Pin


@dataclass(frozen=True)
class Slimming:
    patterns: tuple[str, ...]
    why: str

    def drops(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.patterns)


SLIMMING = {
    "sglang-kernel": Slimming(
        patterns=("sgl_kernel/sm100/*", "sgl_kernel/infllm_ops*.so"),
        why="dropped sgl_kernel/sm100/ (loaded only when compute capability != 9.0) and "
        "infllm_ops*.so (only sgl_kernel.infllm_v2 loads it; sglang 0.5.17 never calls it)",
    ),
    "zstandard": Slimming(
        patterns=("zstandard/_cffi*.so", "zstandard/backend_cffi.py"),
        why="dropped the CFFI backend (CPython imports backend_c)",
    ),
}


def _record_without(record: bytes, dropped: set[str]) -> bytes:
    """The RECORD file minus the rows of dropped files, so pip's bookkeeping stays true."""
    rows = [row for row in csv.reader(io.StringIO(record.decode())) if row and row[0] not in dropped]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def rezip(pin: Pin, src: Path, dest_dir: Path, compression: int = zipfile.ZIP_STORED) -> tuple[Path, str]:
    """Write ``src`` into ``dest_dir`` with ``compression``, slimmed if the pin has rules.

    Returns the new wheel and a note for the manifest ("" when nothing was dropped).
    """
    slimming = SLIMMING.get(pin.key)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        dropped = {info.filename for info in infos if slimming and slimming.drops(info.filename)}
        if slimming and not dropped:
            raise RuntimeError(f"{src.name}: slimming rules {slimming.patterns} matched nothing; "
                               "the wheel's layout changed, re-check repack.SLIMMING")
        with zipfile.ZipFile(dest, "w", compression, allowZip64=True) as zout:
            for info in infos:
                if info.filename in dropped:
                    continue
                out_info = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                out_info.external_attr = info.external_attr
                out_info.compress_type = compression
                out_info.file_size = info.file_size  # lets zipfile pick zip64 by itself
                if info.filename.endswith(".dist-info/RECORD") and dropped:
                    zout.writestr(out_info, _record_without(zin.read(info), dropped))
                    continue
                with zin.open(info) as fin, zout.open(out_info, "w") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
    return dest, (slimming.why if slimming else "")
