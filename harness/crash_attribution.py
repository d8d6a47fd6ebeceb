"""Crash attribution: each cell recorded as crashed is re-run alone to see whether the crash is its own.

A worker dies with whichever cell it was running, but the cause may be an earlier cell of the
same worker (an out-of-bounds write under Triton's CPU interpreter, a poisoned CUDA context). The
lone run's verdict goes into the cell's record: `reproduced_alone` true (its own crash), false
(it passed or failed alone: look at what ran before it in that worker), or null (not re-run, over
the budget, or the lone run told nothing), with `lone_run` saying what the lone run did.
"""

from __future__ import annotations

from typing import Callable, Sequence

from harness.lone_run import LONE_TIMEOUT_S, run_alone

CONFIRM_DEFAULT = 5  # lone re-runs per session; each costs a process start (and, on a GPU, a CUDA context)


def confirm_crashes(crashed: Sequence[dict], args: list[str], budget: int, say: Callable[[str], None],
                    timeout: float = LONE_TIMEOUT_S) -> dict[str, dict]:
    """Re-run up to `budget` crashed cells alone; return the fields to add to each crashed cell's record."""
    notes = {}
    for index, record in enumerate(crashed):
        if index >= budget:
            notes[record["cell_id"]] = {"reproduced_alone": None,
                                        "lone_run": f"not re-run: over the --confirm-crashes {budget} budget"}
            continue
        outcome = run_alone(record["nodeid"], args, f"lone-crash-{index}", timeout=timeout)
        reproduced = None if outcome.status is None else outcome.status == "crashed"
        notes[record["cell_id"]] = {"reproduced_alone": reproduced, "lone_run": outcome.message}
        say(f"crash attribution: {record['cell_id']}: "
            + {True: "reproduced alone", False: "DID NOT reproduce alone (the crash may belong to a cell "
               "that ran before it in the same worker)", None: "not confirmed alone"}[reproduced]
            + f" -> {outcome.message}")
    return notes


def attribution_summary(notes: dict[str, dict]) -> str | None:
    """One line for the end of the run: how many crashes were confirmed, refuted, left open."""
    if not notes:
        return None
    verdicts = [fields["reproduced_alone"] for fields in notes.values()]
    refuted = sorted(cell_id for cell_id, fields in notes.items() if fields["reproduced_alone"] is False)
    return (f"crash attribution: {len(notes)} crashed cells: {verdicts.count(True)} reproduced alone, "
            f"{len(refuted)} did not{': ' + ', '.join(refuted) if refuted else ''}, "
            f"{verdicts.count(None)} unconfirmed")
