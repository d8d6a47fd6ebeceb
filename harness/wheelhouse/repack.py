"""Re-zip wheels: uncompressed for the archive, and without files a Hopper runner never loads.

A wheel is a deflate zip, and zstd cannot squeeze deflated bytes much further, while the same
files stored uncompressed shrink well under a fast zstd level with a long window: sglang-kernel
0.4.10's FA3 library (``flash_ops.abi3.so``, 1.07 GB) is 326 MiB deflated and 159 MiB under
zstd -3 with a 2 GiB window. A stored zip is still a valid wheel, so pip installs it as it is.

Each dropped file names who loads it, so the rule can be re-checked against a new release
(read the code named in ``why``). A rule whose pattern matches nothing fails the build: the
wheel's layout changed and the rule must be looked at again.

The zstandard wheel travels on its own, still deflated (nothing on the runner could undo
zstd yet), and CPython only ever imports its C backend, so its CFFI backend stays behind.
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
class Drop:
    pattern: str  # fnmatch pattern over the paths inside the wheel
    why: str  # who loads the files and when, i.e. why a Hopper runner never does


_PROTON = ("the proton profiler's; loaded only through triton.profiler, which neither sglang nor "
           "torch imports (inductor only with config.triton.proton_profiling)")

SLIMMING: dict[str, tuple[Drop, ...]] = {
    "sglang-kernel": (
        Drop("sgl_kernel/sm100/*", "sgl_kernel/load_utils.py loads sm100/common_ops only when the "
             "compute capability is not 9.0; H100 and H200 load sm90/"),
        Drop("sgl_kernel/infllm_ops*.so", "loaded only by sgl_kernel.infllm_v2._loader.load_infllm_ops(), "
             "called inside infllmv2_attn_stage1 (MiniCPM sparse attention), never at import"),
    ),
    "torch": (
        Drop("torch/bin/protoc*", "the protobuf compiler, used when building torch; nothing at run time runs it"),
    ),
    "triton": (
        Drop("triton/backends/nvidia/bin/ptxas-blackwell", "triton/backends/nvidia/compiler.py get_ptxas() "
             "uses it only for arch >= 100"),
        Drop("triton/backends/nvidia/lib/cupti/*", f"CUPTI for {_PROTON}"),
        Drop("triton/backends/nvidia/lib/cupti-blackwell/*", f"CUPTI (arch >= 100) for {_PROTON}"),
        Drop("triton/_C/libproton.so", _PROTON),
        Drop("triton/instrumentation/libGPUInstrumentationTestLib.so", "an LLVM pass plugin for triton's own "
             "tests; no triton code loads it"),
    ),
    "zstandard": (
        Drop("zstandard/_cffi*.so", "CPython imports backend_c, never the CFFI backend"),
        Drop("zstandard/backend_cffi.py", "CPython imports backend_c, never the CFFI backend"),
    ),
}


def _record_without(record: bytes, dropped: set[str]) -> bytes:
    """The RECORD file minus the rows of dropped files, so pip's bookkeeping stays true."""
    rows = [row for row in csv.reader(io.StringIO(record.decode())) if row and row[0] not in dropped]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def _dropped(name: str, infos: list[zipfile.ZipInfo], rules: tuple[Drop, ...]) -> dict[Drop, list[zipfile.ZipInfo]]:
    """The members each rule drops; raise if a rule matches nothing (the layout changed)."""
    matched = {rule: [info for info in infos if fnmatch.fnmatchcase(info.filename, rule.pattern)] for rule in rules}
    stale = [rule.pattern for rule, members in matched.items() if not members]
    if stale:
        raise RuntimeError(f"{name}: slimming pattern(s) {stale} matched nothing; the wheel's layout "
                           "changed, re-check repack.SLIMMING against the code that loads those files")
    return matched


def _note(matched: dict[Drop, list[zipfile.ZipInfo]]) -> str:
    return "; ".join(f"dropped {rule.pattern} ({sum(i.file_size for i in members) / (1 << 20):.1f} MiB): {rule.why}"
                     for rule, members in matched.items())


def rezip(pin: Pin, src: Path, dest_dir: Path, compression: int = zipfile.ZIP_STORED) -> tuple[Path, str]:
    """Write ``src`` into ``dest_dir`` with ``compression``, slimmed if the pin has rules.

    Returns the new wheel and a note for the manifest ("" when nothing was dropped).
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        matched = _dropped(src.name, infos, SLIMMING.get(pin.key, ()))
        dropped = {info.filename for members in matched.values() for info in members}
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
    return dest, _note(matched)
