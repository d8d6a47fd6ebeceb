"""The environment that makes a ``pip install --target`` folder fully usable.

PYTHONPATH: the target, plus what its ``.pth`` files add. PYTHONPATH entries are plain path
entries and Python does not read the ``.pth`` files in them, and nvidia-cutlass-dsl depends
on one (``nvidia_cutlass_dsl_packages.pth`` puts ``nvidia_cutlass_dsl/dsl_packages`` on
sys.path; without it ``import cutlass`` fails). The ``.pth`` files are evaluated once here, in
a child interpreter through ``site.addsitedir``. This beats a ``sitecustomize.py`` in the
target, which would shadow the interpreter's own, and it holds in every child process
(pytest-xdist workers) since it is only an environment variable.

LD_LIBRARY_PATH: every ``nvidia/*/lib`` folder the carried wheels brought. For sglang 0.5.23
that is NCCL 2.32.3: torch 2.14.1's libtorch_cuda.so needs symbols (ncclCommGrow,
ncclCommSuspend, ncclSignal, ...) that the image's NCCL 2.28.9 lacks. torch's own loader
already prefers the first ``nvidia/nccl/lib`` on sys.path; the variable makes every other
library that asks the dynamic loader for ``libnccl.so.2`` get the same one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ENV_FILE = "wheelhouse-env.sh"
LIBRARY_DIRS = "nvidia/*/lib"

_CHILD = (
    "import json, site, sys; before = list(sys.path); site.addsitedir(sys.argv[1]); "
    "print(json.dumps([p for p in sys.path if p not in before]))"
)


def pth_paths(target: Path) -> list[str]:
    """``target`` followed by every entry its ``.pth`` files add, in a stable order."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", _CHILD, str(target)], env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"evaluating the .pth files in {target} failed:\n{result.stderr}")
    added = [path for path in json.loads(result.stdout) if path != str(target)]
    return [str(target), *added]


def library_dirs(target: Path) -> list[str]:
    return sorted(str(path) for path in target.glob(LIBRARY_DIRS) if path.is_dir())


def environment(target: Path) -> dict[str, list[str]]:
    """Variable -> folders to put in front of it (empty lists are left out of the exports)."""
    return {"PYTHONPATH": pth_paths(target), "LD_LIBRARY_PATH": library_dirs(target)}


def export_lines(env: dict[str, list[str]]) -> list[str]:
    return [f'export {name}={":".join(paths)}${{{name}:+:${name}}}' for name, paths in env.items() if paths]


def child_env(env: dict[str, list[str]]) -> dict[str, str]:
    """os.environ with ``env`` in front; PYTHONPATH is replaced, so nothing else can shadow the target."""
    out = dict(os.environ)
    for name, paths in env.items():
        keep = [] if name == "PYTHONPATH" else [value for value in [out.get(name)] if value]
        out[name] = os.pathsep.join([*paths, *keep])
    return out


def write_env_file(target: Path, env: dict[str, list[str]]) -> Path:
    """``<target>/wheelhouse-env.sh``, so later shells can ``source`` the same lines."""
    path = target / ENV_FILE
    path.write_text("\n".join(export_lines(env)) + "\n")
    return path
