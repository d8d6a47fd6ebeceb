"""Check an installed wheelhouse the way the harness will use it.

Runs ``probe`` in a child interpreter with exactly the PYTHONPATH that ``install`` printed,
then reports (1) whether sglang's attention backends and the kernels under them import and
(2) whether every carried distribution is the one Python finds, not an image copy of
another version shadowing it. On the Hopper runner ``sgl_kernel`` imports only through
``sm90/common_ops`` (``sm100/`` is not carried), so its line doubles as the GPU check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.wheelhouse import probe, sitepaths
from harness.wheelhouse.manifest import Manifest
from harness.wheelhouse.table import format_table

REPO_ROOT = Path(__file__).resolve().parents[2]

# sglang.kernels.ops.attention.flash_attention_v4 swallows FA4 import errors, so the vendored
# FA4 package is imported directly.
SMOKE_IMPORTS = [
    "torch",
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
]


def _dist_row(pin: str, found, target: Path) -> list[str]:
    version = pin.split("==")[1]
    if found is None:
        return [pin, "-", "NOT FOUND"]
    got_version, location = found
    inside = Path(location).resolve().is_relative_to(target.resolve())
    if not inside:
        return [pin, f"{got_version} from {location}", "SHADOWED"]
    return [pin, f"{got_version} from target", "ok" if got_version == version else "WRONG VERSION"]


def verify(target: Path) -> tuple[bool, str]:
    manifest = Manifest.read(target)  # install copies it there
    names = {wheel.pin: wheel.pin.split("==")[0] for wheel in manifest.wheels}
    paths = sitepaths.pth_paths(target)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    request = json.dumps({"modules": SMOKE_IMPORTS, "dists": list(names.values())})
    result = subprocess.run([sys.executable, "-m", "harness.wheelhouse.probe", request],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith(probe.PREFIX)]
    if result.returncode != 0 or not lines:
        return False, f"the probe process failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
    report = json.loads(lines[-1][len(probe.PREFIX):])
    import_rows = [[module, "ok" if error is None else error] for module, error in report["imports"].items()]
    dist_rows = [_dist_row(pin, report["dists"][name], target) for pin, name in names.items()]
    ok = all(error is None for error in report["imports"].values()) and all(
        row[2] == "ok" for row in dist_rows)
    text = "\n".join([
        format_table(["import", "result"], import_rows), "",
        format_table(["carried", "found", "status"], dist_rows), "",
        "verify: OK" if ok else "verify: FAILED (see the rows above)",
    ])
    return ok, text
