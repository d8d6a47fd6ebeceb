"""What a results file was measured on: date, device, driver, versions, sharding, wall time.

A matrix without its provenance cannot be compared with another one, so every report prints the
same facts, derived here from the run.json records (one per shard) that `merge` collected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from harness.base.releases import UnsupportedVersionError, contracts_of
from harness.reporting.cell_schema import ReportingError


def _distinct(values: Iterable) -> list[str]:
    """Non-null values as strings, first-seen order, each once."""
    seen: dict[str, None] = {}
    for value in values:
        if value is not None:
            seen.setdefault(str(value), None)
    return list(seen)


@dataclass(frozen=True)
class RunFacts:
    """Provenance of one merged result set; fields are display strings, "?" when unrecorded."""

    date: str
    device: str
    driver: str
    versions: str
    shards: str
    workers: str
    wall: str

    @classmethod
    def of(cls, runs: Sequence[Mapping]) -> "RunFacts":
        """Combine the run.json records of all shards; values that differ are listed together."""

        def joined(key: str, sep: str = ", ") -> str:
            return sep.join(_distinct(run.get(key) for run in runs)) or "?"

        dates = sorted(str(run["started_at"])[:10] for run in runs if run.get("started_at"))
        version_sets = [run.get("versions") or {} for run in runs]
        per_package = {
            name: _distinct(versions.get(name) for versions in version_sets)
            for name in _distinct(name for versions in version_sets for name in versions)
        }
        # A package missing everywhere (null) is left out rather than printed as "None".
        versions = ", ".join(f"{name} {'/'.join(found)}" for name, found in per_package.items() if found)
        walls = [run["wall_s"] for run in runs if isinstance(run.get("wall_s"), (int, float))]
        return cls(
            date=dates[0] if dates else "?",
            device=joined("device"),
            driver=joined("driver"),
            versions=versions or "?",
            shards=", ".join(str(run.get("shard", "?")) for run in runs) or "?",
            workers="+".join(str(run.get("workers", "?")) for run in runs) or "?",
            wall=" + ".join(f"{wall:.0f} s" for wall in walls) or "?",
        )

    def line(self) -> str:
        """One line for Markdown reports."""
        return (
            f"{self.date} · {self.device} · driver {self.driver} · {self.versions} · "
            f"shard {self.shards} · workers {self.workers} · wall {self.wall}"
        )


def contracts_ran(runs: Sequence[Mapping], source: str) -> str | None:
    """The release whose contracts the runs used (and whose KNOWN_FAILURES entries apply to them),
    from the sglang version their records name; None when none names one. Entries are scoped by
    release, so a results file of two releases cannot be judged as one."""
    ran = _distinct((run.get("versions") or {}).get("sglang") for run in runs)
    if len(ran) > 1:
        raise ReportingError(f"{source}: its runs used sglang {', '.join(sorted(ran))}; entries are scoped by "
                             "release, so judge each release's results.json on its own")
    try:
        return contracts_of(ran[0]) if ran else None
    except UnsupportedVersionError as err:
        raise ReportingError(f"{source}: {err}") from None
