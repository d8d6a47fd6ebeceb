"""Runs inside a child interpreter that has the installed wheelhouse on its PYTHONPATH.

Imports each module and looks up each distribution, and prints one JSON line (prefixed, so
whatever the imports print cannot be mistaken for it). A separate process, because a failed
import of a CUDA extension can leave the interpreter in a state no later check can trust.
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


def probe(modules: list[str], dists: list[str]) -> dict:
    imports = {}
    for module in modules:
        try:
            importlib.import_module(module)
            imports[module] = None
        except BaseException as error:  # noqa: BLE001 - a failed import is the finding
            imports[module] = _first_line(error)
    found = {}
    for name in dists:
        try:
            dist = importlib.metadata.distribution(name)
            found[name] = [dist.version, str(dist.locate_file(""))]
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return {"imports": imports, "dists": found}


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    print(PREFIX + json.dumps(probe(request["modules"], request["dists"])), flush=True)
