"""One cell: (case, backend, runner form, padding) -> comparisons, end to end.

This is the path a reader follows: case -> layout and pools -> ForwardBatch as
the scheduler fills it -> the backend entry builds sglang's backend -> the
runner form executes it -> each step's output against the reference (and, for
CUDA graphs, against the same batch run eagerly). A graph cell captures once and
replays on its own batch and an extra one (harness/cell/cell_matrix.py), all
requests in one set of pools under one backend. Each phase's wall time goes
with the result (harness/base/results.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fnmatch
import functools
import itertools
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import triton
import triton.language as tl

from harness.base import platform
from harness.families import BACKENDS, FAMILIES
from harness.base.case_spec import CaseSpec
from harness.cell import batch_invariance
from harness.cell.batch_invariance import Cut
from harness.cell.cell_matrix import Cell, ReplayBatch, cell_batch, replay_batches, skip_reason
from harness.checks.compare import HALF_ULP, CellResult, compare
from harness.modes import MODES
from harness.modes.base import SpecMode
from harness.checks.host_sync import UNGUARDED, SyncLog
from harness.checks.invariants import check_backend, check_row_capacity
from harness.fixtures.kernel_paths import kernel_path
from harness.fixtures.pools import BatchState, StepInputs, build_layout, req_to_token_width
from harness.base.results import PhaseClock
from harness.modes.scheduler_rules import production_row_lens
from harness.runners import RUNNER_FORMS
from harness.runners.cuda_graph import CapturedGraph, GraphPlan
from harness.fixtures.sglang_env import (layer_sliding_window, model_runner, scheduler_keeps_host_mirrors, server_fields,
                                sglang_state)


# (step backend, q, k, v, layer, forward batch, save_kv_cache) -> the forward's output (AttentionFamily.forward)
Attend = Callable[..., torch.Tensor]


class CellSkipped(Exception):
    """The cell cannot run here; the message is the reason a report shows."""


def _check_host_mirrors(spec, backend: str, server_args, attn_backend) -> None:
    """Run GPU-only variants only where sglang's scheduler really takes that path.

    The scheduler drops seq_lens_cpu / seq_lens_sum only when no backend in
    play needs them; sglang decides that in decide_needs_cpu_seq_lens (#26128),
    which we ask rather than re-implement.
    """
    if spec.host_mirrors == "full":
        return
    # The worker passes all its backend slots; an unset one (e.g. no separate
    # draft-extend backend) is None, and sglang must skip it.
    if scheduler_keeps_host_mirrors(server_args, [attn_backend, None]):
        raise CellSkipped(
            f"{backend} declares needs_cpu_seq_lens (or leaves it undeclared), so sglang's scheduler "
            "keeps seq_lens_cpu/seq_lens_sum for it: the GPU-only path never reaches it "
            "(decide_needs_cpu_seq_lens, sglang PR #26128)")


def promises_sync_free(spec: CaseSpec, server_args, attn_backend) -> bool:
    """Does sglang's scheduler run this backend without host lengths (so its per-step metadata hooks
    must not sync), in a state production reaches, on a device that can sync? Asked of sglang
    (decide_needs_cpu_seq_lens), as the GPU-only variant is."""
    return (platform.HAS_GPU and spec.host_mirrors != "none"
            and not scheduler_keeps_host_mirrors(server_args, [attn_backend, None]))


@dataclass(frozen=True)
class _Batch:
    """One batch of a cell, ready to run: its ForwardBatch, each step's inputs and reference."""

    run: ReplayBatch
    steps: list
    inputs: list
    forward_batch: object
    state: BatchState  # its requests' view of the pools (the K/V the reference read)

    @property
    def expected(self) -> list[torch.Tensor]:
        return [step.expected for step in self.inputs]


@dataclass(frozen=True)
class PreparedCell:
    """A cell ready to run: sglang's backend built on pools holding every batch the cell runs, each
    batch's inputs drawn and its reference computed."""

    cell: Cell
    mode: SpecMode
    backend: object
    layer: object
    batches: list[_Batch]  # in run order: a graph cell's replay order, else the cell's batch alone
    context_len: int
    attend: Attend  # one forward of the backend, as the family's model hands it Q/K/V
    sync_log: SyncLog  # the host syncs its per-step metadata hooks made (harness/checks/host_sync.py)

    @property
    def own(self) -> _Batch:
        return next(batch for batch in self.batches if not batch.run.extra)


def census_slack(inputs: StepInputs, splits: tuple[str | None, ...], dtype: str) -> torch.Tensor | None:
    """The census bound's allowance, per query and element, for the partial merges (harness/checks/compare.py
    HALF_ULP) of the outputs compared: one split for a comparison with the reference, two for replay
    against eager (each side's rounding counts)."""
    parts = [inputs.census[split] for split in splits if split in inputs.census]
    return HALF_ULP[dtype] * sum(parts) if parts else None


def _partial_split(cell: Cell, graph: bool) -> str | None:
    return BACKENDS[cell.backend].partial_split(cell.case.mode, cell.case.spec, graph)


def _compare_steps(label: str, outputs, expected, batch: _Batch, splits: tuple[str | None, ...],
                   bitwise: bool = False) -> dict:
    """Compare only rows of the batch's own requests (small_real fillers are not asserted); ``bitwise``
    for two runs a deterministic kernel must make equal (no bound, no census allowance)."""
    spec = batch.run.spec
    found = {}
    for index, (out, want, step, inputs) in enumerate(zip(outputs, expected, batch.steps, batch.inputs)):
        kept = [row for row, q in enumerate(step.queries) if q.request < batch.run.real_bs]
        labels = [step.labels[row] for row in kept]
        # every row (no filler requests) needs no index; else one index from the host, never a mask (a wait each)
        rows = slice(None) if len(kept) == len(step.queries) else torch.tensor(kept, device=want.device)
        slack = None if bitwise else census_slack(inputs, splits, spec.dtype)
        found[f"{label} step {index}"] = compare(out.reshape(want.shape)[rows], want[rows], spec.dtype, labels,
                                                 None if slack is None else slack[rows], bitwise=bitwise)
    return found


def run_cuts(prepared: PreparedCell) -> list[tuple[Cut, _Batch, list]]:
    """The batch-invariance runs (harness/cell/batch_invariance.py): each cut of the cell's own requests
    run eagerly on the same backend, with the whole batch's draws for its rows. Returns (cut, its batch,
    its outputs) per cut."""
    mine, mode = prepared.own, prepared.mode
    done = []
    for cut in batch_invariance.cuts(prepared.cell.case.spec):
        spec = cut.spec(mine.run.spec)
        state = _batch_view(mine.state, spec, slice(cut.start, cut.stop))
        steps = mode.steps(spec)
        batch = _Batch(ReplayBatch(spec, spec.bs, extra=False), steps,
                       batch_invariance.cut_inputs(mine.steps, mine.inputs, cut, steps),
                       mode.forward_batch(state, steps), state)
        done.append((cut, batch, run_eager(mode, prepared.backend, batch.forward_batch, batch.inputs,
                                           prepared.layer, prepared.attend)))
    return done


def _compare_cuts(cut_runs: list, eager: list, mine: _Batch, split: str | None, bitwise: bool) -> dict:
    """Each cut's outputs against its rows of the whole batch's eager outputs."""
    found = {}
    for cut, batch, outputs in cut_runs:
        in_batch = [out.reshape(want.shape)[batch_invariance.rows_of(step, cut)].to(torch.float64)
                    for out, want, step in zip(eager, mine.expected, mine.steps)]
        found.update(_compare_steps(f"{cut.label} vs in the batch", outputs, in_batch, batch, (split, split),
                                    bitwise=bitwise))
    return found


FORCE_CRASH_ENV = "ATTN_HARNESS_FORCE_CRASH"
FORCE_HANG_ENV = "ATTN_HARNESS_FORCE_HANG"


@triton.jit
def _store_one(pointer, offset):
    tl.store(pointer + offset, 1.0)


def _illegal_write_on_gpu() -> None:
    """A kernel store to address 0: the CUDA illegal memory access an out-of-bounds bug causes (sticky)."""
    target = torch.zeros(4, device="cuda")
    _store_one[(1,)](target, -(target.data_ptr() // target.element_size()))
    torch.cuda.synchronize()


def _segfault_on_cpu() -> None:
    """A genuine SIGSEGV of the process (a read of address 0), as an interpreter out-of-bounds access causes."""
    ctypes.string_at(0)


def _crash() -> None:
    {"cuda": _illegal_write_on_gpu, "cpu": _segfault_on_cpu}[platform.DEVICE]()


def _hang() -> None:
    """A cell that never returns, as a spinning kernel or an interpreter in a corrupted heap does."""
    threading.Event().wait()


# Drills: cells whose id matches the glob in the variable do this instead of running. A crash poisons
# the process (on a GPU its CUDA context, on CPU a segfault); a hang never returns. Either way the run
# must record those cells, keep running every other cell, and account for all of them.
DRILLS = {FORCE_CRASH_ENV: _crash, FORCE_HANG_ENV: _hang}


def _drills(cell: Cell) -> None:
    for variable, act in DRILLS.items():
        pattern = os.environ.get(variable)
        if pattern and fnmatch.fnmatchcase(cell.cell_id, pattern):
            act()


def _one_pool_spec(specs: list[CaseSpec]) -> CaseSpec:
    """The requests of every batch, in order, as one case: what the pools hold."""
    first = specs[0]
    windows = None if first.input_lens is None else [w for spec in specs for w in spec.input_lens]
    prefixes = [prefix for spec in specs for prefix in spec.prefix_lens]
    return first.model_copy(update=dict(prefix_lens=prefixes, input_lens=windows))


def _batch_view(state: BatchState, spec: CaseSpec, requests: slice) -> BatchState:
    """Some of the pools' requests as one batch: the same pools and generator, its own rows."""
    layout = dataclasses.replace(state.layout, req_pool_indices=state.layout.req_pool_indices[requests],
                                 row_slots=state.layout.row_slots[requests])
    return dataclasses.replace(state, spec=spec, layout=layout, row_k=state.row_k[requests],
                               row_v=state.row_v[requests])


@contextlib.contextmanager
def built_backend(specs: list[CaseSpec], mode: SpecMode, entry, extra_rows: int,
                  clock: PhaseClock | None = None) -> Iterator[tuple]:
    """One set of pools holding the requests of every batch in ``specs``, and sglang's backend
    built on them, inside sglang's server-args state.

    Yields (states, server_args, backend), one state per batch. The first spec's seed draws the
    layout and the K/V, and its other fields (all but the requests) configure the backend.
    ``extra_rows`` reserves pool rows for graph padding.
    """
    clock = clock or PhaseClock()
    first, pool_spec = specs[0], _one_pool_spec(specs)
    family = FAMILIES[first.family]
    path = kernel_path(first.kernel_path)
    with contextlib.ExitStack() as stack:
        if path:
            stack.enter_context(path.environment())  # read when the backend is built and as it runs
        with clock.phase("layout_pools"):
            row_lens = mode.row_lens(pool_spec)
            layout = build_layout(pool_spec.kv_layout, row_lens, pool_spec.page_size, pool_spec.seed,
                                  extra_rows=extra_rows)
            server_args = stack.enter_context(
                sglang_state(server_fields(first, entry.server_arg, mode.speculative_args(first))))
            check_row_capacity(production_row_lens(mode, pool_spec), pool_spec.prefix_lens,
                               pool_spec.model_context_len, req_to_token_width(pool_spec, server_args))
            state = family.build_state(pool_spec, layout, row_lens, platform.DEVICE, server_args)
            starts = itertools.accumulate((spec.bs for spec in specs), initial=0)
            states = [_batch_view(state, spec, slice(start, start + spec.bs)) for spec, start in zip(specs, starts)]
        with clock.phase("backend"):
            runner_obj = model_runner(first, state.pools, server_args, platform.DEVICE,
                                      is_draft_worker=mode.backend_role != "target", algorithm=mode.spec_algorithm,
                                      family_fields=family.runner_fields(first, state.pools.context_len))
            backend = mode.build_backend(entry.build, runner_obj, first)
            refusal = path and path.apply_to(backend)
            if refusal:
                raise CellSkipped(f"{entry.name}: kernel path {path.name}: {refusal}")
        yield states, server_args, backend


def import_sglang() -> None:
    """The sglang modules every cell uses: the first cell a worker runs pays for them here (or the
    worker's collection, while a warm-up pass runs: harness/session/pytest_plugin.py)."""
    import sglang.srt.layers.radix_attention  # noqa: F401
    import sglang.srt.mem_cache.memory_pool  # noqa: F401
    import sglang.srt.model_executor.forward_batch_info  # noqa: F401


def replay_all(prepared: PreparedCell, clock: PhaseClock) -> tuple[dict, list[tuple[str, list]]]:
    """Capture once, replay on every batch in order, each against its reference.

    Returns the comparisons, and each batch's replay label and outputs, in batch order.
    """
    cell, mode, batches = prepared.cell, prepared.mode, prepared.batches
    first = batches[0].run.spec
    # The backend's batch has rows_per_request rows per request (frozen-KV MTP repeats each topk times).
    plan = GraphPlan(backend=cell.backend, capture_bs=cell.capture_bs * mode.rows_per_request(first),
                     capture=RUNNER_FORMS[cell.runner].captures,
                     topk=first.topk, context_len=prepared.context_len, multi_step=mode.backend_role == "draft_multi_step",
                     tokens_per_request=mode.tokens_per_request(first))
    with clock.phase("capture"):
        graph = CapturedGraph(mode, prepared.backend, prepared.layer, plan, batches[0].forward_batch, batches[0].inputs,
                              prepared.attend, prepared.sync_log)
        graph.capture()
    comparisons, replays, previous = {}, [], None
    for number, batch in enumerate(batches, start=1):
        label = batch.run.label(number, previous)
        with clock.phase("replay"):
            outputs = graph.replay(batch.forward_batch, batch.inputs, label)
        with clock.phase("compare"):
            comparisons.update(_compare_steps(f"{label} vs reference", outputs, batch.expected, batch,
                                              (_partial_split(cell, graph=True),)))
        replays.append((label, outputs))
        previous = batch.run
    return comparisons, replays


def run_eager(mode: SpecMode, backend, forward_batch, step_inputs: list[StepInputs], layer, attend: Attend,
              sync_log: SyncLog = UNGUARDED) -> list:
    """The eager form: init metadata once (its host syncs into ``sync_log``), then one backend forward
    per step, as the workers do.

    Returns each step's output [tokens, heads * head_dim].
    """
    with sync_log.guard("eager init_forward_metadata"):
        backend.init_forward_metadata(forward_batch)
    check_backend(backend, "eager init_forward_metadata")
    outputs = []
    for inputs, (step_backend, view) in zip(step_inputs, mode.step_views(backend, forward_batch)):
        view._attn_output = inputs.poisoned_output()
        outputs.append(attend(step_backend, inputs.q, inputs.k, inputs.v, layer, view, inputs.k is not None))
    return outputs


@contextlib.contextmanager
def prepared_cell(cell: Cell, clock: PhaseClock) -> Iterator[PreparedCell]:
    """The cell's batches on one built backend, inside sglang's server-args state (the forwards
    must run within it). Raises CellSkipped where sglang's scheduler would not take the cell's path."""
    with clock.phase("imports"):
        import_sglang()
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

    mode, entry = MODES[cell.case.mode], BACKENDS[cell.backend]
    runs = replay_batches(cell) if RUNNER_FORMS[cell.runner].graph else [cell_batch(cell)]
    own = next(run for run in runs if not run.extra)
    in_pools = [own, *(run for run in runs if run.extra)]  # the cell's own requests first
    spec = own.spec
    with built_backend([run.spec for run in in_pools], mode, entry, extra_rows=cell.capture_bs or 0,
                       clock=clock) as (states, server_args, attn_backend):
        with clock.phase("backend"):
            _check_host_mirrors(spec, cell.backend, server_args, attn_backend)
            family = FAMILIES[spec.family]
            shape = family.shape(spec)
            window = layer_sliding_window(spec)
            layer = RadixAttention(shape.num_heads, shape.qk_head_dim, shape.scale, shape.num_kv_heads, layer_id=0,
                                   v_head_dim=shape.v_head_dim, attn_type=AttentionType[mode.attn_type],
                                   **({} if window is None else {"sliding_window_size": window}))
        with clock.phase("inputs_reference"):
            graph_forms = (True, False) if RUNNER_FORMS[cell.runner].graph else (False,)
            census_splits = tuple(sorted({split for graph in graph_forms if (split := _partial_split(cell, graph))}))
            prepared = {}
            for run, state in zip(in_pools, states):
                steps = mode.steps(run.spec)
                inputs = family.draw_inputs(state, steps, shape, census_splits)
                prepared[id(run)] = _Batch(run, steps, inputs, mode.forward_batch(state, steps), state)
        yield PreparedCell(cell, mode, attn_backend, layer, [prepared[id(run)] for run in runs],
                           states[0].pools.context_len, functools.partial(family.forward, entry.server_arg),
                           SyncLog(promises_sync_free(spec, server_args, attn_backend)))


# A worker keeps the GPU memory its cells freed (torch's caching allocator) for the next cell; past this much
# it hands it back after the cell. On the scale tier workers that had run one large cell each held 20-28 GiB
# and the others ran out of memory (2026-11-28, H200: 495 of 2,000 cells); hand-matrix cells stay below it.
RELEASE_CACHED_ABOVE_BYTES = 2 << 30


def _release_cached_memory() -> None:
    if platform.HAS_GPU and torch.cuda.memory_reserved() > RELEASE_CACHED_ABOVE_BYTES:
        torch.cuda.empty_cache()


def run_cell(cell: Cell) -> CellResult:
    reason = skip_reason(cell)
    if reason:
        raise CellSkipped(reason)
    try:
        return _run_cell(cell)
    finally:
        _release_cached_memory()


def _run_cell(cell: Cell) -> CellResult:
    _drills(cell)
    clock = PhaseClock()
    graph = RUNNER_FORMS[cell.runner].graph
    spec = cell.case.spec
    with prepared_cell(cell, clock) as prepared:
        mine = prepared.own
        comparisons, replays = replay_all(prepared, clock) if graph else ({}, [])
        with clock.phase("eager"):
            eager = run_eager(prepared.mode, prepared.backend, mine.forward_batch, mine.inputs, prepared.layer,
                              prepared.attend, prepared.sync_log)
        with clock.phase("invariance"):
            cut_runs = run_cuts(prepared) if spec.batch_invariance else []
    with clock.phase("compare"):
        eager_split = _partial_split(cell, graph=False)
        comparisons.update(_compare_steps("eager vs reference", eager, mine.expected, mine, (eager_split,)))
        comparisons.update(_compare_cuts(cut_runs, eager, mine, eager_split, spec.deterministic))
        if graph:
            replay_label, replayed = next(replay for replay, batch in zip(replays, prepared.batches) if batch is mine)
            eager64 = [out.reshape(want.shape).to(torch.float64) for out, want in zip(eager, mine.expected)]
            comparisons.update(_compare_steps(f"{replay_label} vs eager", replayed, eager64, mine,
                                              (_partial_split(cell, graph=True), eager_split),
                                              bitwise=spec.deterministic))
    result = CellResult(comparisons, clock.rounded())
    if result.ok:  # a wrong number is the louder finding; the syncs it hides show in cells that pass
        prepared.sync_log.check()
    return result
