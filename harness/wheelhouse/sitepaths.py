"""The PYTHONPATH that makes a ``pip install --target`` folder fully importable.

PYTHONPATH entries are plain path entries: Python does not read the ``.pth`` files in them.
nvidia-cutlass-dsl depends on one (``nvidia_cutlass_dsl_packages.pth`` puts
``nvidia_cutlass_dsl/dsl_packages`` on sys.path; without it ``import cutlass`` fails). The
``.pth`` files are evaluated once here, in a child interpreter through
``site.addsitedir``, and what they add is written out as extra PYTHONPATH entries. This
beats a ``sitecustomize.py`` in the target, which would shadow the interpreter's own
sitecustomize, and it holds in every child process (pytest-xdist workers) since it is
only an environment variable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ENV_FILE = "wheelhouse-env.sh"

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


def export_line(paths: list[str]) -> str:
    return f'export PYTHONPATH={":".join(paths)}${{PYTHONPATH:+:$PYTHONPATH}}'


def write_env_file(target: Path, paths: list[str]) -> Path:
    """``<target>/wheelhouse-env.sh``, so later shells can ``source`` the same line."""
    path = target / ENV_FILE
    path.write_text(export_line(paths) + "\n")
    return path
