"""A recorded run judged again against today's KNOWN_FAILURES.md, without running a cell.

Entries are written from a run's records, after the run: a new bug's cells fail as new failures the
night they appear, and the entry that names them comes later. Whether the entry holds them (each
inside its signature) and holds nothing else (no cell that passed falls under it) is a question about
the records, not about the GPU that made them, so it is answered here from results.json. A record
keeps the traits of the harness that ran it, so traits are recomputed from today's case files where
the case is among them (generated cells keep their recorded traits).

Entries are scoped by sglang release: a run is judged under the release its records say it ran
(results.json runs[].versions), whichever sglang is installed where it is judged.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from harness.base.case_spec import Case
from harness.case.case_traits import traits_of
from harness.ledger.failure_class import Failure
from harness.ledger.known_failures import KnownFailure, match
from harness.reporting.cell_schema import EXECUTED
from harness.reporting.markdown import markdown_table

PASSING = ("passed", "xpassed")
INSIDE, OUTSIDE, UNCOVERED, COVERED_PASS = "inside", "outside the signature", "no entry", "covered but passed"
ALARMING = (OUTSIDE, UNCOVERED, COVERED_PASS)


@dataclass(frozen=True)
class Judgement:
    cell_id: str
    status: str  # as recorded
    entry: str | None
    verdict: str  # INSIDE, OUTSIDE, UNCOVERED or COVERED_PASS
    detail: str = ""


def _with_traits(cell: Mapping, cases: Mapping[tuple[str, str], Case]) -> Mapping:
    case = cases.get((cell["mode"], cell["case"]))
    return {**cell, "traits": traits_of(case)} if case else cell


def rejudge(cells: Iterable[Mapping], entries: list[KnownFailure], cases: Iterable[Case],
            release: str | None = None) -> list[Judgement]:
    """The verdict today's ledger gives each recorded cell that failed, or passed under an entry, with
    the entries of ``release`` (contracts; default the installed sglang's)."""
    by_name = {(case.mode, case.spec.name): case for case in cases}
    judged = []
    for record in cells:
        if record["status"] not in EXECUTED:
            continue
        cell_id, status, reason = record["cell_id"], record["status"], record.get("reason") or ""
        entry = match(entries, _with_traits(record, by_name), release)
        if status in PASSING:
            if entry:
                judged.append(Judgement(cell_id, status, entry.id, COVERED_PASS))
        elif entry is None:
            judged.append(Judgement(cell_id, status, None, UNCOVERED, reason))
        elif not record.get("failure_class"):  # no class to hold against the signature: never guess one
            judged.append(Judgement(cell_id, status, entry.id, OUTSIDE,
                                    f"the record carries no failure class; {reason}"))
        else:
            failure = Failure(record["failure_class"], "", reason[:120], record.get("max_abs_err"))
            outside = entry.outside_signature(failure)
            judged.append(Judgement(cell_id, status, entry.id, OUTSIDE if outside else INSIDE, outside or ""))
    return judged


def render(judged: list[Judgement]) -> str:
    counts = Counter((j.verdict, j.entry or "–") for j in judged)
    rows = [[verdict, entry, str(n)] for (verdict, entry), n in sorted(counts.items())]
    lines = [*markdown_table(["verdict", "KNOWN_FAILURES entry", "cells"], rows), ""]
    lines += [f"- `{j.cell_id}` ({j.status}): {j.verdict}{' of ' + j.entry if j.entry else ''}"
              f"{': ' + j.detail[:300] if j.detail else ''}" for j in judged if j.verdict in ALARMING]
    alarming = sum(j.verdict in ALARMING for j in judged)
    lines.append(f"{len(judged)} cells judged: {len(judged) - alarming} inside their entry's signature, "
                 f"{alarming} not (no entry, outside the signature, or an entry over a cell that passed)")
    return "\n".join(lines) + "\n"
