"""Key-census probe: is a census failure the rounding of partial attention states, or a wrong key?

`python -m harness.probes.census_probe -k EXPR --out FOLDER [--processes N]` runs the hand-matrix cells that
EXPR selects (pytest's -k grammar over cell ids) on a GPU and writes ``census_probe.json`` and
``CENSUS_PROBE.md`` there. As the harness's run does, it first compiles one cell per kernel
configuration (harness/speed/warmup.py), then N processes each probe a share of the cells.

Why: on sglang 0.5.23 the FA3/FA4 tree cells (cascade attention) and FlashInfer's draft extend fail
only in the key-census head (harness/checks/compare.py), by 0.004-0.016 against a bound of about 0.002
(reports/gpu/TRIAGE.md). These kernels attend in two parts, a prefix part and a draft part, each
written as an output in the model's dtype plus an fp32 log-sum-exp, and merge them (MERGE_SITES), so
each partial is rounded before the merge; the census bound assumes one rounding. The census head
makes the parts checkable: its q is 0, so every score is 0, a partial's LSE is log(number of keys
it holds) exactly and its output must be the mean of V over those keys.

For every batch a cell runs (a graph cell's own and extra batch), the probe runs the batch eagerly
with sglang's merge functions wrapped to copy the census head's partials and LSEs. Only eager
forwards are wrapped, so capture and replay run sglang's code untouched; a graph cell's replays run
first, as in run_cell, and each query's replay output is measured beside its eager one. Backends
and paths with no merge (Triton, FA with topk 1, FlashInfer's verify and graph paths) get the
final-error figures alone. Per query (census head, harness/checks/compare.py), float64:

- ``keys``: keys the query attends; ``err``: max |out - mean of V over them| over head_dim.
- ``census_x``: err / the census bound (atol + rtol |ref|); above 1 the harness fails the cell.
- ``model_x``: err / the rounding model's bound, per element u (sum_i w_i |p_i| + |out|), with w_i the
  merge weight of partial p_i (its share of keys, from the LSEs) and u the unit roundoff of the
  dtype (ROUNDOFF); with no merge, u |out|. At most 1 when each partial and the output are rounded
  once, to nearest.
- ``plain_x``: err / u (mean of |V| over the attended keys + |out|), a bound that needs no knowledge
  of the split: sum_i w_i |p_i| <= mean |V| elementwise, so it covers any split into parts.
- ``signal``: the least a wrong key moves the census output, min over attended a and candidate b
  (the request's written keys the query may not see, and sglang's zero padding key) of
  max_d |V_a - V_b|_d / keys; ``signal_x`` is the same in units of the plain bound: at 2 or more the
  plain bound still catches every such wrong key whatever the rounding.
- ``parts``: per partial, ``holds`` (prefix: the row positions below the request's prefix length;
  draft: the rest; inferred from the count, None when the count matches neither split: a wrong,
  missing or extra key), ``keys`` (from the LSE), ``lse``, ``err`` against the mean of V over the
  keys it holds and ``half_ulps`` (err in half-ulps of the partial's dtype at that mean; round to
  nearest gives at most 1).
- ``replay_err``, ``replay_census_x``, ``replay_plain_x`` (graph cells): the replay's output by the same
  measures; ``replay_vs_eager``: max |replay - eager|, 0 where the eager analysis describes the replay
  (FlashInfer's graph form takes another path: one paged prefill, no merge sglang's Python sees).

CENSUS_PROBE.md: one row per backend x mode x draft shape x runner over the queries the harness
compares (small_real fillers are in the JSON, marked ``compared: false``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from harness.base import cli, platform
from harness.case.cases import load_all_cases
from harness.cell.cell_matrix import Cell, expand_cells, in_shard, keyword_selected, skip_reason
from harness.checks.compare import CENSUS_TOLERANCES, census_heads
from harness.reporting.markdown import markdown_table
from harness.base.results import PhaseClock
from harness.cell.run_cell import CellSkipped, prepared_cell, replay_all, run_eager
from harness.runners import RUNNER_FORMS
from harness.speed.warmup import plan_warm_up

PREFIX, DRAFT = "prefix", "draft"


@dataclass(frozen=True)
class MergeSite:
    """A function sglang calls to merge two partial attention states, where its module looks it up."""

    module: str
    function: str
    lse_base: float  # the partials' LSE is log to this base of their softmax denominators
    parts: tuple[str, str]  # the keys sglang's first and second partial hold (breaks a tie in counts)
    calls: str  # where sglang 0.5.23 calls it


_FA_MERGE = MergeSite(
    "sglang.srt.layers.attention.flashattention_backend", "merge_state_v2", math.e, (PREFIX, DRAFT),
    "FlashAttentionBackend.forward_extend (TARGET_VERIFY with topk > 1: prefix part over the page table, "
    "draft part over forward_metadata_spec_decode_expand, merged by merge_state_v2_wrapper, which calls "
    "this name) and forward_decode (draft decode with topk > 1, the same two parts); natural-log LSEs: "
    "sglang's merge_state.py uses this kernel and the exp-based merge_state_triton interchangeably")
_FLASHINFER_CALLS = ("FlashInferAttnBackend.forward_extend, ragged path (eager EXTEND / DRAFT_EXTEND_V2 with a "
                     "prefix): _safe_merge_state(o1 = ragged part, the new tokens, causal; o2 = paged part, "
                     "the prefix); FlashInfer's LSEs are base 2")
MERGE_SITES: dict[str, tuple[MergeSite, ...]] = {
    "fa3": (_FA_MERGE,),
    "fa4": (_FA_MERGE,),
    "flashinfer": tuple(MergeSite("sglang.srt.layers.attention.flashinfer_backend", name, 2.0, (DRAFT, PREFIX),
                                  _FLASHINFER_CALLS)
                        for name in ("merge_state", "merge_state_triton")),  # the second: many heads
}

# Unit roundoff per output dtype; fp32 takes tf32's, as GPU dots read fp32 V in tf32 (harness/checks/compare.py).
ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-11}
COUNT_RTOL = 1e-4  # an fp32 LSE of log(n) gives n to about 1e-6
WITHIN_ONE_ROUNDING = 1.01  # half-ulps and model ratios up to this are one rounding (fp32 sums add ~1e-6)


# --- the pure parts: counts, bounds, one query's figures -------------------------------------

def key_counts(lse: torch.Tensor, base: float) -> torch.Tensor:
    """Keys behind each partial of the census head: its LSE is log_base(count). A non-finite LSE is an
    empty part (sglang's merge kernels read +inf and -inf alike as no weight)."""
    lse = lse.double()
    return torch.where(torch.isfinite(lse), torch.pow(base, lse), torch.zeros_like(lse))


def assign_parts(counts: list[float], expected: dict[str, int], declared: tuple[str, str]) -> tuple[str, str] | None:
    """Which key set each partial holds, read from its key count: the declared order if the counts fit
    it, else the other order, else None (the kernel attended a wrong, missing or extra key)."""
    for roles in (declared, declared[::-1]):
        if all(abs(count - expected[role]) <= COUNT_RTOL * max(1, expected[role])
               for count, role in zip(counts, roles)):
            return roles
    return None


def half_ulps(error: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``error`` in half-ulps of ``dtype`` at the reference's magnitude: rounding to nearest errs at most 1."""
    info = torch.finfo(dtype)
    exponent = torch.floor(torch.log2(reference.abs().clamp_min(info.tiny)))
    return error / (torch.exp2(exponent) * info.eps / 2)


def model_bound(partials: list[torch.Tensor], weights: list[float], out: torch.Tensor, u: float) -> torch.Tensor:
    """u (sum_i w_i |p_i| + |out|): each partial rounded once, then the merged output once."""
    return u * (sum(w * p.abs() for w, p in zip(weights, partials)) + out.abs())


def plain_bound(v_attended: torch.Tensor, out: torch.Tensor, u: float) -> torch.Tensor:
    """u (mean over attended keys of |V| + |out|): covers any split of the keys into rounded parts."""
    return u * (v_attended.abs().mean(dim=0) + out.abs())


def wrong_key_signal(v_attended: torch.Tensor, v_wrong: torch.Tensor, bound: torch.Tensor) -> tuple[float, float]:
    """(signal, signal / bound): the least that one of ``v_wrong`` in place of one attended key moves
    the mean, as max over dims of |V_a - V_b| / n, and that change in units of the bound."""
    n = v_attended.shape[0]
    signal, in_bounds = math.inf, math.inf
    for wrong in v_wrong:  # few candidates; n x head_dim per candidate
        moved = (v_attended - wrong).abs() / n
        signal = min(signal, float(moved.max(dim=1).values.min()))
        in_bounds = min(in_bounds, float((moved / bound).max(dim=1).values.min()))
    return signal, in_bounds


@dataclass(frozen=True)
class Partial:
    """One partial state of the census head for one query, as a merge received it."""

    out: torch.Tensor  # [head_dim], its values in float
    lse: float
    dtype: torch.dtype  # what the kernel stored it in
    lse_base: float


def _figure(value: float) -> float:
    return float(f"{value:.4g}")


def output_figures(v_attended: torch.Tensor, ref: torch.Tensor, out: torch.Tensor, dtype: str) -> dict:
    """err, census_x and plain_x of one census output (module docstring); float64 inputs."""
    tol = CENSUS_TOLERANCES[dtype]
    diff = (out - ref).abs()
    return dict(err=float(diff.max()), census_x=float((diff / (tol["atol"] + tol["rtol"] * ref.abs())).max()),
                plain_x=float((diff / plain_bound(v_attended, out, ROUNDOFF[dtype])).max()))


def query_figures(v_row: torch.Tensor, attended: list[int], prefix: int, ref: torch.Tensor, out: torch.Tensor,
                  dtype: str, partials: list[Partial], declared: tuple[str, str] | None,
                  candidates: list[int], replay: torch.Tensor | None = None) -> dict:
    """One query's census figures (module docstring). v_row: [row_len, head_dim] V of the census head's
    KV head over the request's row; attended: row positions the query sees; ref: float64 mean of V over
    them; out: the backend's eager census output; candidates: row positions a wrong key could come
    from; replay: the graph's census output for the query, if the cell replays."""
    v_row, ref, out = v_row.double(), ref.double(), out.double()
    u = ROUNDOFF[dtype]
    v_attended = v_row[attended]
    diff = (out - ref).abs()
    plain = plain_bound(v_attended, out, u)
    figures = dict(keys=len(attended), **output_figures(v_attended, ref, out, dtype))
    if partials:
        key_sets = {PREFIX: [p for p in attended if p < prefix], DRAFT: [p for p in attended if p >= prefix]}
        counts = [float(key_counts(torch.tensor([p.lse]), p.lse_base)) for p in partials]
        holds = assign_parts(counts, {role: len(keys) for role, keys in key_sets.items()}, declared)
        scaled = torch.tensor([p.lse * math.log(p.lse_base) if math.isfinite(p.lse) else -math.inf
                               for p in partials], dtype=torch.float64)
        weights = torch.softmax(scaled, dim=0).tolist() if torch.isfinite(scaled).any() else [0.0] * len(partials)
        model = model_bound([p.out.double() for p in partials], weights, out, u)
        figures["parts"] = [_part(p, count, role, key_sets, v_row) for p, count, role
                            in zip(partials, counts, holds or [None] * len(partials))]
    else:
        model = u * out.abs()
    figures["model_x"] = float((diff / model).max())
    wrong = torch.cat([v_row[candidates], torch.zeros_like(v_row[:1])])  # sglang's padding page holds zeros
    figures["signal"], figures["signal_x"] = wrong_key_signal(v_attended, wrong, plain)
    if replay is not None:
        replay = replay.double()
        again = output_figures(v_attended, ref, replay, dtype)
        figures.update({f"replay_{name}": value for name, value in again.items()},
                       replay_vs_eager=float((replay - out).abs().max()))
    return {name: _figure(value) if isinstance(value, float) else value for name, value in figures.items()}


def _part(partial: Partial, count: float, role: str | None, key_sets: dict[str, list[int]], v_row) -> dict:
    found = dict(holds=role, keys=_figure(count), lse=_figure(partial.lse))
    if role is None:
        found["expected"] = {name: len(keys) for name, keys in key_sets.items()}
    elif key_sets[role]:
        mean = v_row[key_sets[role]].mean(dim=0)
        error = (partial.out.double() - mean).abs()
        found.update(err=_figure(float(error.max())),
                     half_ulps=_figure(float(half_ulps(error, mean, partial.dtype).max())))
    return found


# --- recording sglang's merges ---------------------------------------------------------------

@dataclass(frozen=True)
class Merge:
    """One merge call, reduced to the census head: each partial's output [tokens, head_dim] and LSE [tokens]."""

    site: MergeSite
    outs: tuple[torch.Tensor, torch.Tensor]
    lses: tuple[torch.Tensor, torch.Tensor]
    dtype: torch.dtype

    def partials(self, row: int) -> list[Partial]:
        return [Partial(out[row], float(lse[row]), self.dtype, self.site.lse_base)
                for out, lse in zip(self.outs, self.lses)]


@contextlib.contextmanager
def recorded_merges(sites: tuple[MergeSite, ...], head: int) -> Iterator[list[Merge]]:
    """Within the block, each site's function copies the census head's partial states (in float32,
    exactly the stored values) into the yielded list before merging. Meant for eager forwards only:
    a copy made during capture would be a graph node reading the capture's dummy batch."""
    merges: list[Merge] = []
    replaced = []
    try:
        for site in sites:
            module = importlib.import_module(site.module)
            original = getattr(module, site.function)
            replaced.append((module, site.function, original))
            setattr(module, site.function, _recording(original, site, head, merges))
        yield merges
    finally:
        for module, name, original in reversed(replaced):
            setattr(module, name, original)


def _recording(merge, site: MergeSite, head: int, merges: list[Merge]):
    def recording(v_a, s_a, v_b, s_b, *args, **kwargs):
        merges.append(Merge(site, tuple(v[:, head].to(torch.float32, copy=True) for v in (v_a, v_b)),
                            tuple(s[:, head].to(torch.float32, copy=True) for s in (s_a, s_b)), v_a.dtype))
        return merge(v_a, s_a, v_b, s_b, *args, **kwargs)

    return recording


# --- one cell on the device ------------------------------------------------------------------

def _batch_figures(batch, eager: list, replayed: list | None, merges: list[Merge], head: int) -> dict:
    """Every query of one batch: its figures, each step's merge matched with that step's forward."""
    spec = batch.run.spec
    group = spec.num_heads // spec.num_kv_heads
    found = dict(real_bs=batch.run.real_bs, extra=batch.run.extra, merges=len(merges), queries=[])
    if merges and (len(merges) != len(batch.steps)
                   or any(m.outs[0].shape[0] != len(step.queries) for m, step in zip(merges, batch.steps))):
        found["problem"] = (f"{len(merges)} merges of {[m.outs[0].shape[0] for m in merges]} rows for "
                            f"{len(batch.steps)} forwards of {[len(s.queries) for s in batch.steps]} queries")
        merges = []
    shape = (-1, spec.num_heads, spec.head_dim)
    v_rows = [v[:, head // group] for v in batch.state.row_v]
    written = [(~torch.isnan(v).any(dim=1)).nonzero().flatten().tolist() for v in v_rows]
    for index, (step, inputs) in enumerate(zip(batch.steps, batch.inputs)):
        out = eager[index].reshape(shape)[:, head]
        merge = merges[index] if merges else None
        for row, (query, label) in enumerate(zip(step.queries, step.labels)):
            attended = list(query.positions())
            v_row = v_rows[query.request]
            seen = set(attended)
            candidates = [p for p in written[query.request] if p not in seen]
            figures = query_figures(v_row, attended, spec.prefix_lens[query.request], inputs.expected[row, head],
                                    out[row], spec.dtype, merge.partials(row) if merge else [],
                                    merge.site.parts if merge else None, candidates,
                                    replayed[index].reshape(shape)[row, head] if replayed is not None else None)
            found["queries"].append(dict(query=label, request=query.request,
                                         compared=query.request < batch.run.real_bs, **figures))
    return found


def probe_cell(cell: Cell) -> dict:
    """The census figures of every batch the cell runs; skipped or error with the reason otherwise."""
    identity = dict(cell_id=cell.cell_id, backend=cell.backend, mode=cell.case.mode, draft_shape=cell.case.spec.draft_shape,
                    runner=cell.runner, dtype=cell.case.spec.dtype)
    reason = skip_reason(cell)
    heads = census_heads(cell.case.spec.num_heads)
    if reason or not heads:
        return dict(identity, skipped=reason or "one head: no key-census head")
    sites = MERGE_SITES.get(cell.backend, ())
    try:
        with prepared_cell(cell, PhaseClock()) as prepared:
            graph = RUNNER_FORMS[cell.runner].graph
            replays = replay_all(prepared, PhaseClock())[1] if graph else [None] * len(prepared.batches)
            batches = []
            for batch, replay in zip(prepared.batches, replays):
                with recorded_merges(sites, heads[0]) as merges:
                    eager = run_eager(prepared.mode, prepared.backend, batch.forward_batch, batch.inputs,
                                      prepared.layer, prepared.attend)
                figures = _batch_figures(batch, eager, replay[1] if replay else None, merges, heads[0])
                batches.append(dict(label=replay[0] if replay else "eager", **figures))
    except CellSkipped as skipped:
        return dict(identity, skipped=str(skipped))
    except Exception as error:  # noqa: BLE001 - one cell's failure is its record, the others still run
        return dict(identity, error=f"{type(error).__name__}: {error}"[:500])
    return dict(identity, merge_sites=[f"{s.module}.{s.function}" for s in sites], batches=batches)


# --- the report --------------------------------------------------------------------------------

TABLE_COLUMNS = (  # (row field, header): eager figures, then the replay's (graph cells)
    ("backend", "backend"), ("mode", "mode"), ("shape", "shape"), ("runner", "runner"), ("cells", "cells"),
    ("queries", "queries"), ("merged", "merged"), ("over", "over census bound"), ("err", "max err"),
    ("census_x", "max err / census bound"), ("model_x", "max err / model"), ("plain_x", "max err / plain"),
    ("half_ulps", "max partial half-ulps"), ("unexpected", "unexpected key counts"),
    ("signal_x", "min signal / plain"), ("replay_over", "replay over census bound"),
    ("replay_plain_x", "max replay err / plain"), ("replay_vs_eager", "max replay vs eager"), ("reading", "reading"))


def _reading(row: dict) -> str:
    """What the row's figures say, in the terms of the question the probe answers."""
    if row["unexpected"]:
        return "WRONG KEY COUNT"
    if row["problems"]:
        return "MERGES NOT MATCHED TO FORWARDS (see below)"
    if row["model_x"] > WITHIN_ONE_ROUNDING or row["half_ulps"] > WITHIN_ONE_ROUNDING:
        reading = "beyond the rounding model" + ("" if row["merged"] else " (no merge seen)")
    else:
        reading = "rounding of the partials" if row["merged"] else "rounding of the output"
    if row["replay_vs_eager"]:  # the replay computed otherwise than the eager run the reading is about
        beyond = row["replay_plain_x"] > WITHIN_ONE_ROUNDING
        reading += f"; the replay differs from eager, {'beyond' if beyond else 'within'} the plain bound"
    return reading


def table_rows(cells: list[dict]) -> list[dict]:
    """One row per backend x mode x draft shape x runner, over the compared queries of every batch."""
    rows: dict[tuple, dict] = {}
    for cell in cells:
        if "batches" not in cell:
            continue
        key = (cell["backend"], cell["mode"], cell["draft_shape"], cell["runner"])
        row = rows.setdefault(key, dict(zip(("backend", "mode", "shape", "runner"), key), cells=0, queries=0,
                                        merged=0, over=0, err=0.0, census_x=0.0, model_x=0.0, plain_x=0.0,
                                        half_ulps=0.0, unexpected=0, signal_x=None, replay_over=None,
                                        replay_plain_x=None, replay_vs_eager=None, problems=0))
        row["cells"] += 1
        for batch in cell["batches"]:
            row["problems"] += "problem" in batch
            for query in (q for q in batch["queries"] if q["compared"]):
                row["queries"] += 1
                row["over"] += query["census_x"] > 1
                for name in ("err", "census_x", "model_x", "plain_x"):
                    row[name] = max(row[name], query[name])
                row["signal_x"] = min(row["signal_x"] or math.inf, query["signal_x"])
                parts = query.get("parts", [])
                row["merged"] += bool(parts)
                row["unexpected"] += any(part["holds"] is None for part in parts)
                row["half_ulps"] = max([row["half_ulps"], *(part.get("half_ulps", 0.0) for part in parts)])
                if "replay_vs_eager" in query:
                    row["replay_over"] = (row["replay_over"] or 0) + (query["replay_census_x"] > 1)
                    for name in ("replay_plain_x", "replay_vs_eager"):
                        row[name] = max(row[name] or 0.0, query[name])
    for row in rows.values():
        row["reading"] = _reading(row)
    return list(rows.values())


def markdown(rows: list[dict], cells: list[dict], selection: str) -> str:
    def shown(value) -> str:
        return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)

    body = [[shown(row[name]) for name, _ in TABLE_COLUMNS] for row in rows]
    lines = [f"# Key-census probe (-k {selection!r})", "",
             "Figures and their meaning: harness/probes/census_probe.py. Over the queries the harness compares, "
             "census head only; 'merged': queries whose partial states were recorded.", "",
             *markdown_table([header for _, header in TABLE_COLUMNS], body)]
    notes = [f"- {c['cell_id']}: {c.get('error') or c.get('skipped')}" for c in cells if "batches" not in c]
    notes += [f"- {c['cell_id']} {b['label']}: {b['problem']}" for c in cells for b in c.get("batches", ())
              if "problem" in b]
    return "\n".join([*lines, *(["", "Cells without figures, and batches whose merges could not be matched:", *notes]
                                if notes else [])]) + "\n"


def write_report(out: Path, selection: str, cells: list[dict]) -> str:
    """census_probe.json and CENSUS_PROBE.md from the cells' records, in place of the processes' lines;
    returns the markdown."""
    rows = table_rows(cells)
    sites = [dict(backend=name, **dataclasses.asdict(site)) for name, sites in MERGE_SITES.items() for site in sites]
    report = dict(selection=selection, device=platform.device_description(), versions=platform.versions(),
                  merge_sites=sites, table=rows, cells=cells)
    text = markdown(rows, cells, selection)
    (out / "census_probe.json").write_text(json.dumps(report) + "\n")
    (out / "CENSUS_PROBE.md").write_text(text)
    for part in out.glob("cells-*.jsonl"):
        part.unlink()
    return text


# --- the command -------------------------------------------------------------------------------

def _probe_share(cells: list[Cell], out: Path, shard: tuple[int, int]) -> None:
    """Probe cells one by one, a JSON line each as it finishes (a crash keeps what came before)."""
    with (out / f"cells-{shard[0]}-of-{shard[1]}.jsonl").open("w") as lines:
        for cell in cells:
            lines.write(json.dumps(probe_cell(cell)) + "\n")
            lines.flush()


def _run_shares(argv_base: list[str], processes: int) -> list[int]:
    """N copies of this command, each on its --shard of the selection, at once: the GPU takes several
    cells' small kernels together, and a cell that kills its process ends only its share."""
    command = [sys.executable, "-m", "harness.probes.census_probe", *argv_base]
    children = [subprocess.Popen([*command, "--shard", f"{i}/{processes}"]) for i in range(1, processes + 1)]
    return [child.wait() for child in children]


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.probes.census_probe", description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="selection", required=True, metavar="EXPR",
                        help="pytest -k expression over the hand matrix's cell ids")
    parser.add_argument("--out", type=cli.output_folder, required=True, help="folder for the JSON and the table")
    parser.add_argument("--processes", type=cli.positive_int, default=1,
                        help="cells probed by N processes at once (each a copy of this command with --shard)")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="probe only share I of N and write its JSON lines (what --processes runs)")
    args = parser.parse_args(argv)
    try:
        shard = cli.parse_shard(args.shard) if args.shard else (1, 1)
    except ValueError as error:
        parser.error(str(error))
    try:
        selected = [cell for cell in expand_cells(load_all_cases()) if keyword_selected(cell, args.selection)]
    except SyntaxError as error:
        parser.error(f"-k {args.selection!r}: {error.msg}")
    if not selected:
        parser.error(f"-k {args.selection!r} selects no cell of cases/*.yaml")
    if not platform.HAS_GPU:
        print(f"{parser.prog}: needs a CUDA GPU (this machine has none): the partial states it records are the "
              "GPU kernels'", file=sys.stderr)
        return 2
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.shard:
        _probe_share([cell for cell in selected if in_shard(cell, shard)], out, shard)
        return 0
    for stale in out.glob("cells-*.jsonl"):
        stale.unlink()
    warm_up = plan_warm_up(selected, args.processes, out)
    warm_up.start(patches=[]).join()
    print(warm_up.line(), file=sys.stderr)
    statuses = _run_shares(["-k", args.selection, "--out", str(out)], args.processes)
    order = {cell.cell_id: index for index, cell in enumerate(selected)}
    lines = (line for part in out.glob("cells-*.jsonl") for line in part.read_text().splitlines())
    cells = sorted(map(json.loads, lines), key=lambda record: order[record["cell_id"]])
    print(write_report(out, args.selection, cells))
    missing = len(selected) - len(cells)
    if missing or any(statuses):
        print(f"{parser.prog}: {missing} of {len(selected)} cells have no record (exit statuses of the processes: "
              f"{statuses}); rerun those with a narrower -k", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
