"""Runs inside a child interpreter that has the installed wheelhouse on its PYTHONPATH.

Imports each module, reads the versions and the GPU the stack sees, looks up each
distribution, and prints one JSON line (prefixed, so whatever the imports print cannot be
mistaken for it). A separate process, because a failed import of a CUDA extension can leave
the interpreter in a state no later check can trust.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sys

PREFIX = "WHEELHOUSE-PROBE "


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _loaded_libraries(fragment: str) -> list[str]:
    """Files mapped into this process whose path contains ``fragment`` (which NCCL got loaded)."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if fragment in line and "/" in line})


def _gpu() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"device": None, "cuda": torch.version.cuda}
    return {"device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "cuda": torch.version.cuda}


def probe(modules: list[str], versions: list[str], dists: list[str]) -> dict:
    imports = {}
    for module in modules:
        try:
            importlib.import_module(module)
            imports[module] = None
        except BaseException as error:  # noqa: BLE001 - a failed import is the finding
            imports[module] = _first_line(error)
    found_versions = {name: getattr(sys.modules.get(name), "__version__", None) for name in versions}
    try:
        gpu = _gpu()
    except BaseException as error:  # noqa: BLE001 - reported, not raised
        gpu = {"error": _first_line(error)}
    found = {}
    for name in dists:
        try:
            dist = importlib.metadata.distribution(name)
            found[name] = [dist.version, str(dist.locate_file(""))]
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return {"imports": imports, "versions": found_versions, "gpu": gpu,
            "nccl": _loaded_libraries("libnccl"), "dists": found}


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    print(PREFIX + json.dumps(probe(request["modules"], request["versions"], request["dists"])), flush=True)
