"""The manifest: what was built, how to check it, and which transfer carries which file.

It is the only file ``install`` trusts: every part, the bootstrap wheel and every wheel
unpacked from the archive is checked against the sha256 written here. It travels in every
transfer, so that after any subset of stages (a runner lost mid-way starts with an empty
/tmp) ``status`` and ``install`` can name exactly what is still missing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

MANIFEST_NAME = "wheelhouse-manifest.json"
ARCHIVE_NAME = "wheelhouse.tar.zst"  # parts are ARCHIVE_NAME.001, .002, ...
BOOTSTRAP = "zstandard"  # its wheel travels beside the parts


def wheelhouse_files(folder: Path) -> list[Path]:
    """Every file of any build in ``folder`` (parts, bootstrap wheel, manifest), so none goes stale."""
    return [*folder.glob(f"{ARCHIVE_NAME}.*"), *folder.glob(f"{BOOTSTRAP}-*.whl"), *folder.glob(MANIFEST_NAME)]
FORMAT = 2  # 2: the sglang release, and the manifest travels in every stage


@dataclass(frozen=True)
class FileEntry:
    file: str
    size: int
    sha256: str


@dataclass(frozen=True)
class WheelEntry(FileEntry):
    pin: str
    why: str
    note: str = ""


@dataclass(frozen=True)
class Stage:
    """One transfer: the files to copy together, besides the manifest (which every stage carries)."""

    stage: int
    files: list[str]
    size: int


@dataclass
class Manifest:
    sglang: str  # the release whose pins were built
    python: str  # the runner's "major.minor": the wheels are built for it alone
    zstd_level: int
    zstd_window_log: int
    transfer_budget: int
    bootstrap: WheelEntry
    archive: FileEntry
    parts: list[FileEntry]
    wheels: list[WheelEntry]
    stages: list[Stage] = field(default_factory=list)
    build_seconds: float = 0.0
    format: int = FORMAT

    def transferred(self) -> dict[str, FileEntry]:
        """Every file the stages carry besides the manifest, by name."""
        return {entry.file: entry for entry in [*self.parts, self.bootstrap]}

    def write(self, out_dir: Path) -> Path:
        path = out_dir / MANIFEST_NAME
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def read(cls, parts_dir: Path) -> Manifest:
        path = parts_dir / MANIFEST_NAME
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found (every stage carries the manifest, "
                                    "and install copies it into the target)")
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: manifest format {data.get('format')!r}, this code reads {FORMAT}")
        return cls(
            sglang=data["sglang"],
            python=data["python"],
            zstd_level=data["zstd_level"],
            zstd_window_log=data["zstd_window_log"],
            transfer_budget=data["transfer_budget"],
            bootstrap=WheelEntry(**data["bootstrap"]),
            archive=FileEntry(**data["archive"]),
            parts=[FileEntry(**entry) for entry in data["parts"]],
            wheels=[WheelEntry(**entry) for entry in data["wheels"]],
            stages=[Stage(**entry) for entry in data["stages"]],
            build_seconds=data["build_seconds"],
        )
