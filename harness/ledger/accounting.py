"""Every collected cell ends with exactly one status; the controller keeps the ledger.

pytest-xdist replaces a worker that dies, but only --max-worker-restart times (default 4 per
worker); after that it stops, and every cell still queued silently never runs (on an H200, 157
of 318 cells once vanished that way). So the ledger:
- lifts that cap when the user did not set one: a worker that dies running a cell takes that cell
  with it, so such deaths can never outnumber the cells. The cap exists for workers that die
  before running anything (xdist #226, an endless restart loop); the ledger bounds those itself,
  at xdist's own default. A cap the user sets is honoured as given.
- writes the collected cells to the run folder before any runs (results.py `collected.json`);
- at the session's end, writes a `not_run` record, with the reason, for each collected cell that
  has no record, and fails the session if there are any.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.base.results import append_record, cell_record, read_records, run_dir, write_manifest

NO_CAP = str(sys.maxsize)  # what xdist reads as --max-worker-restart when the cap is lifted
STARTUP_DEATHS_PER_WORKER = 4  # xdist's own default cap, applied to deaths before collection
NOT_RUN_LIST = "not_run.txt"


@dataclass
class Ledger:
    """The controller's account of one session's cells."""

    folder: Path
    startup_allowance: int  # workers that may die before collecting anything (0: no xdist)
    user_cap: int | None  # the user's --max-worker-restart, honoured as given
    identities: dict[str, dict] = field(default_factory=dict)  # collected cell id -> record identity
    collected_nodes: set[str] = field(default_factory=set)
    worker_deaths: int = 0
    startup_deaths: int = 0
    stop_reason: str | None = None  # why the session was cut short (interrupt, pytest.exit)

    @classmethod
    def open(cls, option) -> "Ledger":
        """Read xdist's options (lifting its restart cap unless the user set one) and open the run folder."""
        workers = getattr(option, "numprocesses", None) or 0
        user_cap = getattr(option, "maxworkerrestart", None)
        if workers and user_cap is None:
            option.maxworkerrestart = NO_CAP
        return cls(run_dir(), startup_allowance=STARTUP_DEATHS_PER_WORKER * workers,
                   user_cap=None if user_cap is None else int(user_cap))

    def collected(self, identities: list[dict]) -> None:
        """The session's cells, once (every xdist worker reports the same collection)."""
        if not self.identities:
            self.identities = {identity["cell_id"]: identity for identity in identities}
            write_manifest(identities)

    def node_collected(self, node_id: str) -> None:
        self.collected_nodes.add(node_id)

    def node_down(self, node_id: str, error) -> None:
        """Count a dead worker; stop the session if workers keep dying before they collect anything."""
        if error is None:
            return
        self.worker_deaths += 1
        if node_id in self.collected_nodes or self.user_cap is not None:
            return
        self.startup_deaths += 1
        if self.startup_deaths > self.startup_allowance:
            pytest.exit(f"attn-harness: {self.startup_deaths} workers died before collecting any test "
                        f"(last: {error}); stopping instead of restarting them forever",
                        returncode=pytest.ExitCode.INTERNAL_ERROR)

    def not_run_reason(self, session) -> str:
        if self.stop_reason:
            return f"session stopped before this cell ran: {self.stop_reason}"
        if session.shouldfail or session.shouldstop:
            return f"session stopped before this cell ran: {session.shouldfail or session.shouldstop}"
        if self.user_cap is not None and self.worker_deaths > self.user_cap:
            crashes = f"{self.worker_deaths} worker crash" + "es" * (self.worker_deaths != 1)
            return f"worker pool exhausted after {crashes} (--max-worker-restart {self.user_cap})"
        return "no result was recorded: the process running it ended without reporting"

    def close(self, session) -> list[dict]:
        """Record every collected cell without a record as not_run; return all collected cells' records."""
        records = read_records(self.folder)
        missing = [identity for cell_id, identity in self.identities.items() if cell_id not in records]
        reason = self.not_run_reason(session)
        for identity in missing:
            records[identity["cell_id"]] = cell_record(identity, "not_run", reason)
            append_record(records[identity["cell_id"]], worker="controller")
        if missing:
            (self.folder / NOT_RUN_LIST).write_text("".join(i["nodeid"] + "\n" for i in missing), encoding="utf-8")
        return [records[cell_id] for cell_id in self.identities]
