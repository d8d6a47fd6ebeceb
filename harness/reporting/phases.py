"""Where a run's time went: the phase timings of its executed cells, summed per runner form.

Each executed cell's record carries ``phase_s`` (harness/base/results.py); what a cell's pytest
wall time holds beyond its phases is pytest's own per-cell work (``pytest``), and what the run's
wall time holds beyond its cells' (divided over the workers) is start-up and collection.
"""

from __future__ import annotations

from harness.base.results import PHASES


def _row(label: str, cells: list[dict]) -> str:
    # a record written before a phase existed (invariance) spent nothing in it
    totals = {name: sum(cell["phase_s"].get(name, 0.0) for cell in cells) for name in PHASES}
    totals["pytest"] = sum(cell["wall_s"] for cell in cells) - sum(totals.values())
    whole = sum(totals.values())
    shares = " | ".join(f"{totals[name]:.1f} ({totals[name] / whole:.0%})" for name in (*PHASES, "pytest"))
    return f"| {label} | {len(cells)} | {whole:.1f} | {whole / len(cells):.2f} | {shares} |"


def render_phases(results: dict) -> str:
    """A markdown table: per runner form, cells, seconds and each phase's seconds (share)."""
    timed = [cell for cell in results["cells"] if cell.get("phase_s") and cell["wall_s"] is not None]
    if not timed:
        return "no executed cell carries phase timings (records written before phase timings existed?)\n"
    runners = sorted({cell["runner"] for cell in timed})
    header = ["runner", "cells", "cell s", "s / cell", *PHASES, "pytest"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += [_row(runner, [cell for cell in timed if cell["runner"] == runner]) for runner in runners]
    lines.append(_row("all", timed))
    cell_s = sum(cell["wall_s"] for cell in results["cells"] if cell["wall_s"] is not None)
    for run in results["runs"]:
        workers = run.get("workers") or 1
        lines.append(f"\nrun {run.get('run_id')}: wall {run.get('wall_s')} s with {workers} worker(s); "
                     f"cells {cell_s:.1f} s in all ({cell_s / workers:.1f} s per worker), skipped cells "
                     "included; the rest is start-up, collection and the session's end")
    return "\n".join(lines) + "\n"
