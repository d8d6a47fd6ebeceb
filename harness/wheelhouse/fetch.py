"""Download the pinned wheels for the runner's interpreter, not this machine's.

The build machine may run another Python (3.11 here) than the runner (CPython 3.12, x86-64,
glibc 2.39), so pip is told the target explicitly. pip matches ``manylinux_2_N`` tags
exactly, hence the whole range up to the runner's glibc: sglang 0.5.17 only ships
``manylinux_2_34`` wheels, xgrammar ``manylinux_2_27``, and so on.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harness.wheelhouse.pins import Pin, normalize

RUNNER_PYTHON = "3.12"
RUNNER_GLIBC_MINOR = 39  # Ubuntu 24.04
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(RUNNER_GLIBC_MINOR, 16, -1)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]

_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-")


def wheel_key(filename: str) -> tuple[str, str]:
    """(normalized name, version) from a wheel file name."""
    match = _WHEEL_NAME.match(filename)
    if match is None or not filename.endswith(".whl"):
        raise ValueError(f"not a wheel file name: {filename}")
    return normalize(match["name"]), match["version"]


def pip_download_command(pins: list[Pin], dest: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", RUNNER_PYTHON, "--implementation", "cp",
           "--disable-pip-version-check", "-q", "-d", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return cmd + [str(pin) for pin in pins]


def download(pins: list[Pin], dest: Path) -> dict[Pin, Path]:
    """Fetch every pin into ``dest`` (pip skips files already there); map each pin to its wheel."""
    dest.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(pip_download_command(pins, dest))
    if result.returncode != 0:
        raise RuntimeError(f"pip download failed (exit {result.returncode}); see pip's output above")
    found: dict[tuple[str, str], Path] = {}
    for wheel in sorted(dest.glob("*.whl")):
        key = wheel_key(wheel.name)
        if key in found:
            raise RuntimeError(f"{dest} holds two wheels for {key[0]} {key[1]}: "
                               f"{found[key].name} and {wheel.name}; delete the stale one")
        found[key] = wheel
    wheels: dict[Pin, Path] = {}
    for pin in pins:
        wheel = found.get((pin.key, pin.version))
        if wheel is None:
            raise RuntimeError(f"pip reported success but no wheel for {pin} is in {dest}")
        wheels[pin] = wheel
    return wheels
