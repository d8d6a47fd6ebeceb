"""Group the files to transfer into stages that each fit one runner call.

A call carries the working tree plus the carried folder, at most 64 MiB together, so the
budget per stage is set below that (default 48 MiB) to leave room for the repository itself.
The manifest rides in every stage: a runner that was lost and started afresh has an empty
/tmp, and whichever stage reaches it first must be able to say what is still missing. Parts
are sized so that one part and the manifest fill a stage; the small files (the last part,
the bootstrap wheel) are packed largest first into the first stage with room.
"""

from __future__ import annotations

from harness.wheelhouse.manifest import FileEntry, Stage

MIB = 1 << 20
MANIFEST_RESERVE = 1 * MIB  # the manifest is tens of kilobytes; this keeps the plan honest


def part_bytes(budget: int) -> int:
    """The largest part that travels next to the manifest in a stage of ``budget`` bytes."""
    if budget <= MANIFEST_RESERVE:
        raise ValueError(f"a transfer of {budget / MIB:.1f} MiB leaves no room next to the "
                         f"{MANIFEST_RESERVE / MIB:.0f} MiB kept for the manifest; use a larger --transfer-mib")
    return budget - MANIFEST_RESERVE


def plan(files: list[FileEntry], budget: int) -> list[Stage]:
    """Return the fewest stages first-fit-decreasing finds; raise ValueError if a file can never fit."""
    room_per_stage = part_bytes(budget)
    too_big = [entry for entry in files if entry.size > room_per_stage]
    if too_big:
        raise ValueError(f"{too_big[0].file} ({too_big[0].size / MIB:.1f} MiB) does not fit a "
                         f"{budget / MIB:.0f} MiB transfer next to the manifest; build with a larger --transfer-mib")
    batches: list[list[FileEntry]] = []
    used: list[int] = []
    for entry in sorted(files, key=lambda entry: -entry.size):
        room = [i for i, total in enumerate(used) if total + entry.size <= room_per_stage]
        if room:
            batches[room[0]].append(entry)
            used[room[0]] += entry.size
        else:
            batches.append([entry])
            used.append(entry.size)
    return [Stage(number, sorted(entry.file for entry in batch), sum(entry.size for entry in batch))
            for number, batch in enumerate(batches, start=1)]
