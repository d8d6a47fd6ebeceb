"""Smoke-check an installed wheelhouse the way the harness will use it.

Runs ``probe`` in a child interpreter with exactly the environment that ``install`` wrote
(PYTHONPATH replaced, LD_LIBRARY_PATH prefixed), then reports (1) the versions of the stack
and the GPU and NCCL library it sees, (2) whether sglang's attention backends and the kernels
under them import, and (3) whether every carried distribution is the one Python finds, not an
image copy of another version shadowing it. On the Hopper runner ``sgl_kernel`` imports only
through ``sm90/common_ops`` (``sm100/`` is not carried), so its line doubles as the GPU check;
on a machine without a compute-capability-9.0 GPU it fails by design.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import ROOT
from harness.wheelhouse import probe, sitepaths
from harness.wheelhouse.manifest import Manifest
from harness.wheelhouse.table import format_table


# The same module paths hold in sglang 0.5.17 and 0.5.23. flashattention_backend serves FA3
# and FA4 (fa_impl_ver); its FA4 path goes through sglang.kernels.ops.attention.flash_attention_v4,
# which swallows FA4 import errors, so the vendored FA4 package is imported directly.
SMOKE_IMPORTS = [
    "torch",
    "triton",
    "sgl_kernel",
    "sgl_kernel.flash_attn",
    "flashinfer",
    "cutlass.cute",
    "quack",
    "flash_attn.cute.interface",
    "sglang.kernels.ops.attention.flash_attn.cute.interface",
    "sglang.srt.layers.attention.flashattention_backend",
    "sglang.srt.layers.attention.flashinfer_backend",
    "sglang.srt.layers.attention.triton_backend",
    # what the harness's modes import to build each algorithm's inputs (harness/modes/): a
    # dependency only these pull in (setproctitle, through the scheduler) fails here, not in every
    # DFlash cell of a matrix run
    "sglang.srt.speculative.draft_worker_common",
    "sglang.srt.speculative.dflash_info",
    "sglang.srt.speculative.eagle_info",
    "sglang.srt.speculative.frozen_kv_mtp_info",
    "sglang.srt.speculative.frozen_kv_mtp_utils",
    "sglang.srt.speculative.ngram_info",
]
VERSIONS = ["torch", "triton", "sglang", "flashinfer", "sgl_kernel"]


def _dist_status(pin: str, found, target: Path) -> str:
    if found is None:
        return "NOT FOUND"
    got_version, location = found
    if not Path(location).resolve().is_relative_to(target.resolve()):
        return f"SHADOWED by {got_version} from {location}"
    return "ok" if got_version == pin.split("==")[1] else f"WRONG VERSION {got_version}"


def _gpu_line(gpu: dict, nccl: list[str]) -> str:
    if "error" in gpu:
        return f"GPU: {gpu['error']}"
    device = (f"{gpu['device']}, compute capability {'.'.join(map(str, gpu['capability']))}"
              if gpu["device"] else "no GPU visible")
    return f"GPU: {device}; torch CUDA {gpu['cuda']}; libnccl loaded: {', '.join(nccl) or 'none'}"


def verify(target: Path) -> tuple[bool, str]:
    manifest = Manifest.read(target)  # install copies it there
    names = {wheel.pin: wheel.pin.split("==")[0] for wheel in manifest.wheels}
    request = json.dumps({"modules": SMOKE_IMPORTS, "versions": VERSIONS, "dists": list(names.values())})
    result = subprocess.run([sys.executable, "-m", "harness.wheelhouse.probe", request], cwd=ROOT,
                            env=sitepaths.child_env(sitepaths.environment(target)), capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith(probe.PREFIX)]
    if result.returncode != 0 or not lines:
        return False, f"the probe process failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
    report = json.loads(lines[-1][len(probe.PREFIX):])
    import_rows = [[module, "ok" if error is None else error] for module, error in report["imports"].items()]
    dist_problems = [[pin, status] for pin, name in names.items()
                     if (status := _dist_status(pin, report["dists"][name], target)) != "ok"]
    ok = all(error is None for error in report["imports"].values()) and not dist_problems
    return ok, "\n".join([
        f"sglang {manifest.sglang} wheelhouse in {target}",
        "versions: " + ", ".join(f"{name} {version}" for name, version in report["versions"].items()),
        _gpu_line(report["gpu"], report["nccl"]),
        format_table(["import", "result"], import_rows),
        format_table(["carried", "problem"], dist_problems) if dist_problems else
        f"carried: all {len(names)} distributions found in the target at their pinned versions",
        "verify: OK" if ok else "verify: FAILED (see the rows above)",
    ])
