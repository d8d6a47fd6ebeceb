"""Group the files to transfer into batches that each fit one runner transfer.

A transfer is the whole working tree copy plus the carried folder, at most 64 MiB, so the
budget per batch is set below that (default 60 MiB) to leave room for the repository itself.
The manifest rides in stage 1 (``install`` needs it to say what is missing); the parts and
the bootstrap wheel are packed largest first, so small files share a transfer with big ones.
Part order does not matter across stages: ``install`` runs only once every part is there.
"""

from __future__ import annotations

from harness.wheelhouse.manifest import MANIFEST_NAME, FileEntry, Stage

MIB = 1 << 20
MANIFEST_RESERVE = 1 * MIB  # the manifest is tens of kilobytes; this keeps the plan honest


def check_fits(size: int, budget: int, what: str, remedy: str) -> None:
    """Raise ValueError if ``size`` bytes plus the manifest cannot travel in one transfer."""
    if size + MANIFEST_RESERVE > budget:
        raise ValueError(f"{what} of {size / MIB:.1f} MiB does not fit a {budget / MIB:.0f} MiB "
                         f"transfer next to the manifest; {remedy}")


def plan(parts: list[FileEntry], bootstrap: FileEntry, budget: int) -> list[Stage]:
    """Return the fewest stages first-fit-decreasing finds; raise ValueError if a file can never fit.

    Largest files first, each into the first stage with room, so that the small last part
    and the bootstrap wheel fill the gaps next to full parts instead of costing a transfer.
    """
    check_fits(max(part.size for part in parts), budget, "a part", "build with a smaller --part-mb")
    check_fits(bootstrap.size, budget, bootstrap.file, "build with a larger --transfer-mib")
    batches: list[list[FileEntry]] = []
    used: list[int] = []
    for entry in sorted([*parts, bootstrap], key=lambda entry: -entry.size):
        room = [i for i, total in enumerate(used) if total + entry.size <= budget]
        if room:
            batches[room[0]].append(entry)
            used[room[0]] += entry.size
        else:
            batches.append([entry])
            used.append(entry.size + (0 if used else MANIFEST_RESERVE))
    stages = []
    for number, batch in enumerate(batches, start=1):
        files = sorted(entry.file for entry in batch)
        stages.append(Stage(number, [MANIFEST_NAME, *files] if number == 1 else files,
                            sum(entry.size for entry in batch)))
    return stages
