"""What every command line of the harness shares: one-line usage errors, paths checked first.

A user's mistake (a wrong flag value, a missing input, an --out in a folder that does not
exist) is answered with one line naming the flag and what would be valid, and exit status 2,
before any work starts: argparse's own error prints the whole usage block, and a path problem
found halfway through a run prints a traceback. Outputs go where the user says and nowhere
else: a missing parent folder is created only inside the harness's own folders (out/, where runs
write, and reports/, where they are recorded), never elsewhere on the user's behalf.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.base.results import OUTPUT_DIR, RECORDED_DIR

OWN_FOLDERS = (OUTPUT_DIR, RECORDED_DIR)
PYTEST_EXIT = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no cell selected"}
NO_CELL_RAN = (4, 5)  # pytest exit statuses with which it never ran a cell


class Parser(argparse.ArgumentParser):
    """argparse whose usage error is one line, pointing at --help for the rest."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class UsageError(Exception):
    """A problem the user can fix, found after parsing; the entry point prints it as one line."""


def os_problem(error: OSError) -> str:
    """One line for a failed read or write: the path, and what the system said."""
    return f"{error.filename or '?'}: {error.strerror or error}"


def _owned(path: Path) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(folder.resolve()) for folder in OWN_FOLDERS)


def input_file(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return path


def input_folder(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {'not a folder' if path.exists() else 'no such folder'}")
    return path


def _parent_problem(path: Path) -> str | None:
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        return f"{parent} is a file, not a folder"
    if not parent.exists() and not _owned(path):
        return f"folder {parent} does not exist; create it first (only out/ and reports/ are created for you)"
    return None


def output_file(text: str) -> Path:
    """A file to write: not a folder, in a folder that exists (or inside out/ or reports/)."""
    path = Path(text)
    problem = f"{text} is a folder; give a file path" if path.is_dir() else _parent_problem(path)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return path


def output_folder(text: str) -> Path:
    """A folder to write into: created if missing, but only inside one that exists (or out/ or reports/)."""
    path = Path(text)
    problem = f"{text} is a file; give a folder" if path.exists() and not path.is_dir() else _parent_problem(path)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return path


def positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return int(text)


def workers(text: str) -> str:
    """pytest-xdist's -n: a count (0 runs in one process), or auto / logical."""
    if text in ("auto", "logical") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected a number of workers (0 for none), auto or logical")


def worker_counts(text: str) -> list[int]:
    """Several -n values, e.g. 0,2,4 (0: pytest runs the cells itself, no xdist worker)."""
    parts = text.split(",")
    if not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected worker counts separated by commas, e.g. 1,2,4")
    return [int(part) for part in parts]


def parse_shard(text: str) -> tuple[int, int]:
    """--shard i/n -> (i, n), 1 <= i <= n; ValueError with the reason otherwise."""
    try:
        number, total = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n, e.g. 1/4") from None
    if not 1 <= number <= total:
        raise ValueError(f"--shard {text!r}: i must be between 1 and n")
    return number, total


def shard(text: str) -> str:
    """--shard for commands that hand it on to pytest: checked here, passed on as written."""
    try:
        parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--shard ")) from None
    return text


def pytest_stopped(returncode: int, what: str) -> str | None:
    """The line to print when a pytest run did not end normally (cells passed or failed), else None."""
    if returncode not in PYTEST_EXIT:
        return None
    return f"{what}: pytest stopped ({PYTEST_EXIT[returncode]}, exit status {returncode})"
