"""One cell: (case, backend, runner form, padding) -> comparisons, end to end.

This is the path a reader follows: case -> layout and pools -> ForwardBatch as
the scheduler fills it -> the backend entry builds sglang's backend -> the
runner form executes it -> each step's output against the reference (and, for
CUDA graphs, against the same batch run eagerly).
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
from dataclasses import dataclass
from typing import Iterator

import torch
import triton
import triton.language as tl

from harness import platform
from harness.backends import BACKENDS
from harness.runners import RUNNER_FORMS
from harness.pools import build_state
from harness.cases import CaseSpec
from harness.cell_matrix import Cell, skip_reason
from harness.compare import Comparison, compare
from harness.forward_inputs import draw_inputs
from harness.kv_layout import build_layout
from harness.sglang_env import model_runner, scheduler_keeps_host_mirrors, server_fields, sglang_state
from harness.modes import MODES
from harness.runners.cuda_graph import GraphPlan, run_cuda_graph
from harness.runners.eager import run_eager

SMALL_REAL_PREFIXES = (1, 2, 3)


class CellSkipped(Exception):
    """The cell cannot run here; the message is the reason a report shows."""


@dataclass(frozen=True)
class CellResult:
    comparisons: dict[str, Comparison]  # "what vs what, step i" -> comparison

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons.values())

    @property
    def worst(self) -> Comparison:
        return max(self.comparisons.values(), key=lambda c: (not c.ok, c.mismatch_frac, c.max_abs_err))

    def describe(self) -> str:
        bad = [f"{name}: {c.describe()}" for name, c in self.comparisons.items() if not c.ok]
        return "; ".join(bad) or self.worst.describe()


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


def with_small_real_requests(spec: CaseSpec, capture_bs: int) -> CaseSpec:
    """small_real padding: fill the captured batch with short genuine requests."""
    extra = capture_bs - spec.bs
    prefixes = [SMALL_REAL_PREFIXES[i % len(SMALL_REAL_PREFIXES)] for i in range(extra)]
    update = dict(bs=capture_bs, prefix_lens=[*spec.prefix_lens, *prefixes])
    if spec.input_lens is not None:
        update["input_lens"] = [*spec.input_lens, *[spec.input_lens[0]] * extra]
    return spec.model_copy(update=update)


def _compare_steps(label: str, outputs, expected, steps, real_bs: int, spec: CaseSpec) -> dict:
    """Compare only rows of the case's own requests (small_real fillers are not asserted)."""
    shape = (-1, spec.num_heads, spec.head_dim)
    found = {}
    for index, (out, want, step) in enumerate(zip(outputs, expected, steps)):
        rows = torch.tensor([q.request < real_bs for q in step.queries])
        labels = [lab for lab, keep in zip(step.labels, rows.tolist()) if keep]
        found[f"{label} step {index}"] = compare(out.reshape(shape).cpu()[rows], want[rows], spec.dtype, labels)
    return found


FORCE_CRASH_ENV = "ATTN_HARNESS_FORCE_CRASH"


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


CRASHES = {"cuda": _illegal_write_on_gpu, "cpu": _segfault_on_cpu}


def _crash_drill(cell: Cell) -> None:
    """Crash-isolation drill: cells whose id matches the glob in ATTN_HARNESS_FORCE_CRASH kill their process.

    On a GPU the process's CUDA context is poisoned by an illegal memory access; on CPU the
    process segfaults. Either way the run must record those cells as crashed, keep running every
    other cell, and account for all of them.
    """
    pattern = os.environ.get(FORCE_CRASH_ENV)
    if pattern and fnmatch.fnmatchcase(cell.cell_id, pattern):
        CRASHES[platform.DEVICE]()


@contextlib.contextmanager
def built_backend(spec: CaseSpec, mode, entry, extra_rows: int) -> Iterator[tuple]:
    """Pools filled for ``spec`` and sglang's backend built on them, inside sglang's server-args state.

    Yields (state, server_args, backend); ``extra_rows`` reserves pool rows for graph padding.
    """
    row_lens = mode.row_lens(spec)
    layout = build_layout(spec.kv_layout, row_lens, spec.page_size, spec.seed, extra_rows=extra_rows)
    fields = server_fields(spec, entry.server_arg, mode.speculative_args(spec))
    with sglang_state(fields) as server_args:
        state = build_state(spec, layout, row_lens, platform.DEVICE, server_args)
        runner_obj = model_runner(spec, state.pools, server_args, platform.DEVICE,
                                  is_draft_worker=mode.backend_role != "target", algorithm=mode.spec_algorithm)
        yield state, server_args, entry.build(mode.backend_role, runner_obj, spec)


def run_cell(cell: Cell) -> CellResult:
    reason = skip_reason(cell)
    if reason:
        raise CellSkipped(reason)
    _crash_drill(cell)
    from sglang.srt.layers.radix_attention import RadixAttention

    mode, entry, real_bs = MODES[cell.case.mode], BACKENDS[cell.backend], cell.case.spec.bs
    spec = (with_small_real_requests(cell.case.spec, cell.capture_bs)
            if cell.padding == "small_real" else cell.case.spec)
    with built_backend(spec, mode, entry, extra_rows=cell.capture_bs or 0) as (state, server_args, attn_backend):
        _check_host_mirrors(spec, cell.backend, server_args, attn_backend)
        scale = spec.head_dim ** -0.5
        layer = RadixAttention(spec.num_heads, spec.head_dim, scale, spec.num_kv_heads, layer_id=0)
        steps = mode.steps(spec)
        inputs = draw_inputs(state, steps, scale)
        forward_batch = mode.forward_batch(state, steps)
        expected = [i.expected for i in inputs]
        if cell.runner == "eager":
            outputs = run_eager(mode, attn_backend, forward_batch, inputs, layer)
            return CellResult(_compare_steps("eager vs reference", outputs, expected, steps, real_bs, spec))
        plan = GraphPlan(capture_bs=cell.capture_bs,
                         capture=RUNNER_FORMS[cell.runner].captures, topk=spec.topk,
                         context_len=state.pools.context_len,
                         multi_step=mode.backend_role == "draft_multi_step", backend=cell.backend)
        replayed = run_cuda_graph(mode, attn_backend, forward_batch, inputs, layer, plan,
                                  mode.tokens_per_request(spec))
        eager = run_eager(mode, attn_backend, forward_batch, inputs, layer)
    shape = (-1, spec.num_heads, spec.head_dim)
    eager64 = [out.reshape(shape).to("cpu", torch.float64) for out in eager]
    return CellResult({
        **_compare_steps("replay vs reference", replayed, expected, steps, real_bs, spec),
        **_compare_steps("eager vs reference", eager, expected, steps, real_bs, spec),
        **_compare_steps("replay vs eager", replayed, eager64, steps, real_bs, spec),
    })
