"""Make ``zstandard`` importable on the runner, which has no zstd of any kind.

The carried wheel is only a zip: its ``zstandard/`` package is unzipped next to the unpacked
wheels and put first on ``sys.path``. ``install`` checks beforehand that this is the
Python the wheel was built for.
"""

from __future__ import annotations

import importlib
import sys
import zipfile
from pathlib import Path
from types import ModuleType

PACKAGE = "zstandard"


def load(wheel: Path, into: Path) -> ModuleType:
    """Import zstandard from ``wheel``, unzipping it into ``into`` unless already there."""
    if not (into / PACKAGE / "__init__.py").is_file():
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith(f"{PACKAGE}/"):
                    archive.extract(member, into)
    sys.path.insert(0, str(into))
    return importlib.import_module(PACKAGE)
