"""Split one byte stream into numbered part files and read them back as one stream.

Both ends stream: the build never holds the archive in memory, and the runner decompresses
straight from the parts without first writing a 300 MB concatenation to disk. Hashes are
taken on the way through, so no file is read twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class WrittenPart:
    path: Path
    size: int
    sha256: str


class PartWriter:
    """A write-only file object that starts ``<base>.001``, ``.002``... every ``part_bytes``.

    ``sha256`` is the digest of everything written (the reassembled archive); ``parts`` holds
    each part's size and digest once the writer is closed.
    """

    def __init__(self, out_dir: Path, base: str, part_bytes: int):
        if part_bytes <= 0:
            raise ValueError(f"part size must be positive, got {part_bytes} bytes")
        self._out_dir, self._base, self._part_bytes = out_dir, base, part_bytes
        self._whole = hashlib.sha256()
        self._handle = None
        self._part_hash = None
        self._part_size = 0
        self.size = 0
        self.parts: list[WrittenPart] = []

    @property
    def sha256(self) -> str:
        return self._whole.hexdigest()

    def _next_part(self) -> None:
        self._finish_part()
        path = self._out_dir / f"{self._base}.{len(self.parts) + 1:03d}"
        self._handle, self._part_hash, self._part_size = open(path, "wb"), hashlib.sha256(), 0

    def _finish_part(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self.parts.append(WrittenPart(Path(self._handle.name), self._part_size,
                                          self._part_hash.hexdigest()))
            self._handle = None

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self._whole.update(view)
        self.size += len(view)
        while view:
            if self._handle is None or self._part_size == self._part_bytes:
                self._next_part()
            take = view[: self._part_bytes - self._part_size]
            self._handle.write(take)
            self._part_hash.update(take)
            self._part_size += len(take)
            view = view[len(take):]
        return len(data)

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()

    def close(self) -> None:
        self._finish_part()

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class JoinedReader:
    """A read-only file object over several files, in order, as if they were one."""

    def __init__(self, paths: list[Path]):
        self._paths = list(paths)
        self._handle = None

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunks = []
        while size < 0 or size > 0:
            if self._handle is None:
                if not self._paths:
                    break
                self._handle = open(self._paths.pop(0), "rb")
            chunk = self._handle.read(size if size > 0 else CHUNK)
            if not chunk:
                self._handle.close()
                self._handle = None
                continue
            chunks.append(chunk)
            if size > 0:
                size -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._paths = []

    def __enter__(self) -> JoinedReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
