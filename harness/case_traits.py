"""Traits of a case: facts about the state it puts a backend in that no name or glob shows.

A generated case is named by its draw and shape (gen21-52-b240k1s5...), so a KNOWN_FAILURES.md entry
cannot say "every cell whose rows run past the model context" with a glob over names. A trait is
such a fact, computed from the case itself, once, by one rule; an entry selects on it with its
`traits` field, the records carry it (so a report says why a cell is where it is), and the generated
tier passes over draws a known failure covers by trait as it does by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.case_spec import Case
from harness.modes import MODES


def furthest_row_position(case: Case) -> int:
    """One past the furthest req_to_token row position any forward of the case reads or writes."""
    steps = MODES[case.mode].steps(case.spec)
    written = [position + 1 for step in steps for _, position in step.writes]
    read = [query.spans[-1][1] for step in steps for query in step.queries if query.spans]
    return max(written + read, default=0)


@dataclass(frozen=True)
class CaseTrait:
    name: str
    why: str  # what the state is and why it matters, for the docs and error lines
    holds: Callable[[Case], bool]


TRAITS: dict[str, CaseTrait] = {trait.name: trait for trait in (
    CaseTrait(
        "past-context",
        "a forward reads or writes a row position at or past the model's context length: sglang gives "
        "every req_to_token row speculative headroom past context_len (allocation_sizing), and a request "
        "at the context wall uses it, while backends that size their tables by context_len end there",
        lambda case: furthest_row_position(case) > case.spec.model_context_len,
    ),
)}


def traits_of(case: Case) -> tuple[str, ...]:
    """The names of the traits that hold for ``case``, in registry order.

    Cached by the case's content: every cell of a case, and every look-up of the ledger for one cell
    (collection, the verdict, the generator passing over a draw), asks again, and a trait may walk
    every query of a production-sized batch.
    """
    key = (case.mode, case.spec.model_dump_json())
    if key not in _FOUND:
        _FOUND[key] = tuple(name for name, trait in TRAITS.items() if trait.holds(case))
    return _FOUND[key]


_FOUND: dict[tuple[str, str], tuple[str, ...]] = {}
