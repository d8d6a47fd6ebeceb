"""Cascade emulation: the key-census error a two-part attention's rounding makes on a cell's own draws.

`python -m harness.probes.census_cascade CELL_ID [CELL_ID ...] [--split prefix|whole]` prepares the
cell as the run does (the same layout, pools and draws: harness/cell/run_cell.py prepared_cell; no
forward runs), then, in the key-census head, emulates a kernel that attends the committed prefix and
the rest as two parts: each part's output (with q = 0, the mean of V over its keys) rounded to the
cell's dtype, the parts merged by key count and the result rounded once more. Per step it prints the
worst error against the reference, in units of the census bound (harness/checks/compare.py), the
elements over the bound at that query and the reference value there. `--split whole` is the control:
one part, one rounding.

Why: on sglang 0.5.23 the FA3/FA4 tree cells failed only in the census head (reports/gpu/TRIAGE.md).
On those cells' draws this emulation came close to the errors the GPU measured, but not exactly
(the CPU triage of 2026-11-25), so harness/probes/census_probe.py then recorded the kernels' own
partial states on a GPU; the census bound now allows for the merge (harness/checks/compare.py HALF_ULP).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from harness.base import cli
from harness.base.results import PhaseClock
from harness.case.cases import load_all_cases
from harness.cell.cell_matrix import Cell, expand_cells, skip_reason
from harness.cell.run_cell import CellSkipped, prepared_cell
from harness.checks.compare import CENSUS_TOLERANCES, census_heads
from harness.checks.reference import Query

SPLITS = ("prefix", "whole")  # the committed prefix and the rest as two parts; all keys as one


def key_parts(query: Query, prefix: int | None) -> list[list[int]]:
    """The row positions a query sees, as the parts a kernel attends: below ``prefix`` and the rest,
    or one part (None)."""
    keys = list(query.positions())
    if prefix is None:
        return [keys]
    return [[p for p in keys if p < prefix], [p for p in keys if p >= prefix]]


def cascade_output(v: torch.Tensor, parts: list[list[int]], dtype: torch.dtype) -> torch.Tensor:
    """float64 [head_dim]: the mean of ``v`` ([keys, head_dim], float64) over each part rounded to
    ``dtype``, the parts merged in fp32 by their key counts and the result rounded to ``dtype``."""
    total = torch.zeros(v.shape[-1], dtype=torch.float32)
    count = 0
    for part in (part for part in parts if part):
        total += v[part].mean(0).to(torch.float32).to(dtype).to(torch.float32) * len(part)
        count += len(part)
    return (total / count).to(dtype).to(torch.float64)


@dataclass(frozen=True)
class StepFigure:
    step: int
    error: float  # the worst |emulated - reference| over the step's compared queries and head_dim
    census_x: float  # that error over the census bound there (atol + rtol |ref|); above 1 fails a cell
    label: str  # the query where it is
    over: int  # elements of that query over the census bound
    reference: float  # the reference value at the worst element

    def line(self, cell_id: str, split: str) -> str:
        return (f"{cell_id} split={split} step {self.step}: worst census err {self.error:.3g} "
                f"({self.census_x:.3g} x the bound) at {self.label} (elements over bound there: {self.over}, "
                f"ref {self.reference:.3g})")


def cell_figures(cell: Cell, split: str) -> list[StepFigure]:
    """Per step of the cell's own batch, the worst census-head error of the emulated cascade."""
    with prepared_cell(cell, PhaseClock()) as prepared:
        batch = prepared.own
    spec = batch.run.spec
    head = census_heads(spec.num_heads)[0]
    kv_head = head // (spec.num_heads // spec.num_kv_heads)
    tolerance = CENSUS_TOLERANCES[spec.dtype]
    dtype = getattr(torch, spec.dtype)
    rows_v = [row[:, kv_head].to("cpu", torch.float64) for row in batch.state.row_v]
    figures = []
    for number, (step, inputs) in enumerate(zip(batch.steps, batch.inputs)):
        expected = inputs.expected[:, head].to("cpu", torch.float64)
        worst = None
        for index, query in enumerate(step.queries):
            if query.request >= batch.run.real_bs:  # small_real fillers are not compared
                continue
            prefix = spec.prefix_lens[query.request] if split == "prefix" else None
            want = expected[index]
            error = (cascade_output(rows_v[query.request], key_parts(query, prefix), dtype) - want).abs()
            bound = tolerance["atol"] + tolerance["rtol"] * want.abs()
            at = int(error.argmax())
            if worst is None or error[at] > worst.error:
                worst = StepFigure(number, float(error[at]), float(error[at] / bound[at]), step.labels[index],
                                   int((error > bound).sum()), float(want[at]))
        if worst is not None:
            figures.append(worst)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.probes.census_cascade", description=__doc__.splitlines()[0])
    parser.add_argument("cell_ids", nargs="+", metavar="CELL_ID", help="cells of the hand matrix (cases/*.yaml)")
    parser.add_argument("--split", choices=SPLITS, default="prefix",
                        help="prefix: the committed prefix and the rest as two parts (default); whole: one part")
    args = parser.parse_args(argv)
    cells = {cell.cell_id: cell for cell in expand_cells(load_all_cases())}
    unknown = [cell_id for cell_id in args.cell_ids if cell_id not in cells]
    if unknown:
        parser.error(f"no cell {unknown[0]!r} in cases/*.yaml")
    status = 0
    for cell_id in args.cell_ids:
        try:
            reason = skip_reason(cells[cell_id])
            if reason:
                raise CellSkipped(reason)
            figures = cell_figures(cells[cell_id], args.split)
        except CellSkipped as why:
            print(f"{parser.prog}: {cell_id}: cannot run here: {why}", file=sys.stderr)
            status = 1
            continue
        for figure in figures:
            print(figure.line(cell_id, args.split))
    return status


if __name__ == "__main__":
    sys.exit(main())
