"""Night-over-night digest: what changed between yesterday's results.json and today's.

A full matrix repeats itself every night; the digest shows only the changes a maintainer acts on
(new failures, crashes and cells that newly did not run first) and its exit status lets the
nightly job alert on them alone. Above them, today's failures grouped by verdict, class and
backend say why the night is red (harness/reporting/verdicts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from harness.reporting.cell_schema import EXECUTED, outcome_message
from harness.reporting.runs import RunFacts
from harness.reporting.verdicts import glance

# A cell is slower when it takes more than SLOWER_FACTOR times as long and SLOWER_MIN_S more
# seconds: the factor ignores noise on long cells, the floor ignores jitter on millisecond ones.
SLOWER_FACTOR = 1.5
SLOWER_MIN_S = 0.5
LIST_LIMIT = 25  # per section; SUMMARY.md has the complete lists
BROKEN = frozenset({"failed", "crashed"})


@dataclass(frozen=True)
class Change:
    cell_id: str
    before: str  # yesterday's status, "new" for a cell that did not exist
    cell: Mapping  # today's record (yesterday's for a disappeared cell)


@dataclass(frozen=True)
class Slowdown:
    cell_id: str
    before_s: float
    after_s: float


@dataclass(frozen=True)
class Digest:
    new_failures: list[Change]
    new_crashes: list[Change]
    newly_not_run: list[Change]
    fixed: list[Change]
    xpassed: list[Change]
    disappeared: list[Change]
    slower: list[Slowdown]
    total_before_s: float
    total_after_s: float

    @property
    def alarming(self) -> bool:
        """What the nightly job alerts on: something broke, or stopped running, since yesterday."""
        return bool(self.new_failures or self.new_crashes or self.newly_not_run)


def is_slower(before_s: float, after_s: float) -> bool:
    return after_s > SLOWER_FACTOR * before_s and after_s - before_s > SLOWER_MIN_S


def compare(today: Mapping, yesterday: Mapping) -> Digest:
    old = {cell["cell_id"]: cell for cell in yesterday["cells"]}
    new = {cell["cell_id"]: cell for cell in today["cells"]}

    def changes(before_ok, now: str) -> list[Change]:
        picked = []
        for cell_id, cell in new.items():
            before = old[cell_id]["status"] if cell_id in old else "new"
            if cell["status"] == now and before_ok(before):
                picked.append(Change(cell_id, before, cell))
        return picked

    slower = [
        Slowdown(cell_id, old[cell_id]["wall_s"], cell["wall_s"])
        for cell_id, cell in new.items()
        if cell_id in old
        and cell["status"] in EXECUTED and old[cell_id]["status"] in EXECUTED
        and cell["wall_s"] is not None and old[cell_id]["wall_s"] is not None
        and is_slower(old[cell_id]["wall_s"], cell["wall_s"])
    ]
    return Digest(
        new_failures=changes(lambda before: before not in BROKEN, "failed"),
        new_crashes=changes(lambda before: before != "crashed", "crashed"),
        newly_not_run=changes(lambda before: before != "not_run", "not_run"),
        fixed=changes(lambda before: before in BROKEN, "passed"),
        xpassed=changes(lambda before: True, "xpassed"),
        disappeared=[Change(cell_id, cell["status"], cell) for cell_id, cell in old.items() if cell_id not in new],
        slower=sorted(slower, key=lambda s: s.after_s - s.before_s, reverse=True),
        total_before_s=sum(cell["wall_s"] or 0 for cell in yesterday["cells"]),
        total_after_s=sum(cell["wall_s"] or 0 for cell in today["cells"]),
    )


def _section(title: str, items: list, line) -> list[str]:
    if not items:
        return []
    lines = [f"## {title} ({len(items)})", ""]
    lines += [line(item) for item in items[:LIST_LIMIT]]
    if len(items) > LIST_LIMIT:
        lines.append(f"- … {len(items) - LIST_LIMIT} more, see SUMMARY.md")
    return lines + [""]


def _change_line(change: Change) -> str:
    return (
        f"- `{change.cell_id}` ({change.before} → {change.cell['status']}): "
        f"{outcome_message(change.cell)} — rerun: `{change.cell['rerun']}`"
    )


def render_digest(digest: Digest, today: Mapping, yesterday: Mapping) -> str:
    counts = (
        f"{len(digest.new_failures)} new failures, {len(digest.new_crashes)} new crashes, "
        f"{len(digest.newly_not_run)} newly not run, {len(digest.fixed)} fixed, "
        f"{len(digest.xpassed)} unexpectedly passed, "
        f"{len(digest.disappeared)} disappeared, {len(digest.slower)} slower"
    )
    total = f"cell time total: {digest.total_before_s:.0f} s → {digest.total_after_s:.0f} s"
    if is_slower(digest.total_before_s, digest.total_after_s):
        total += " (**slower**)"
    lines = [
        "# attn-harness nightly digest",
        "",
        f"today: {RunFacts.of(today['runs']).line()}  ",
        f"yesterday: {RunFacts.of(yesterday['runs']).line()}",
        "",
        f"**{counts}**; {total}",
        "",
        "## Today, by verdict, failure class and backend",
        "",
        *glance(today["cells"]),
        "",
        *_section("New failures", digest.new_failures, _change_line),
        *_section("New crashes", digest.new_crashes, _change_line),
        *_section("Newly not run", digest.newly_not_run, _change_line),
        *_section(
            "Unexpectedly passed: drop their KNOWN_FAILURES entries", digest.xpassed, _change_line
        ),
        *_section("Fixed", digest.fixed, lambda c: f"- `{c.cell_id}` ({c.before} → passed)"),
        *_section("Disappeared", digest.disappeared, lambda c: f"- `{c.cell_id}` (was {c.before})"),
        *_section(
            "Slower",
            digest.slower,
            lambda s: f"- `{s.cell_id}`: {s.before_s:.2f} s → {s.after_s:.2f} s",
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"
