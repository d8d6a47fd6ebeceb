"""Read ``gpu_pins.txt``: one ``name==version  # why`` per line.

Exact pins only: the runner installs with ``--no-deps``, so a range would make the build
depend on the day it ran. The comment is kept because the manifest and the build table show
why each wheel travels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PINS_FILE = Path(__file__).with_name("gpu_pins.txt")

_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)\s*(?:#\s*(?P<why>.*))?$")


def normalize(name: str) -> str:
    """PEP 503 name, so ``pydantic_core`` in a wheel file name matches ``pydantic-core``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    why: str

    @property
    def key(self) -> str:
        return normalize(self.name)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def read_pins(path: Path = PINS_FILE) -> list[Pin]:
    """Parse the pins file; raise ValueError naming the line for anything but an exact pin."""
    pins: list[Pin] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{path}:{lineno}: expected 'name==version  # why', got {raw!r}")
        pin = Pin(match["name"], match["version"], (match["why"] or "").strip())
        if pin.key in seen:
            raise ValueError(f"{path}:{lineno}: {pin.name} is already pinned on line {seen[pin.key]}")
        seen[pin.key] = lineno
        pins.append(pin)
    if not pins:
        raise ValueError(f"{path}: no pins found")
    return pins
