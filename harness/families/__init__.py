"""Attention families: the one registry of them, and of every backend entry they own.

Adding a family is one package here (harness/families/<name>/: a FAMILY with the hooks of
base.AttentionFamily, its backend entries) plus its case files under cases/<name>/; the case
loader, the cell and the reports read families and backends from here (test_add_a_family.py).

May import: base, checks, modes, fixtures.
Imported by: runners, case, bugs, cell, search, reporting, probes, session.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from harness.families.base import AttentionFamily, LayerShape
from harness.families.dense import FAMILY as DENSE
from harness.families.mla import FAMILY as MLA

FAMILIES: dict[str, AttentionFamily] = {family.name: family for family in (DENSE, MLA)}



class _EveryFamilysBackends(Mapping):
    """Every family's backend entries by name, read live from the families (an entry added to a
    family's ``backends`` is in it), so there is no second list to keep in step."""

    def __getitem__(self, name: str):
        for family in FAMILIES.values():
            if name in family.backends:
                return family.backends[name]
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        for family in FAMILIES.values():
            yield from family.backends

    def __len__(self) -> int:
        return sum(len(family.backends) for family in FAMILIES.values())


BACKENDS: Mapping = _EveryFamilysBackends()  # the one registry of backends; names are unique across families


def family_of_backend(name: str) -> str:
    """The family whose entry ``name`` is."""
    return next(family.name for family in FAMILIES.values() if name in family.backends)


__all__ = ["AttentionFamily", "BACKENDS", "FAMILIES", "LayerShape", "family_of_backend"]
