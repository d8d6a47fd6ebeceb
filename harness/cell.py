"""One cell: (case, backend, runner form) -> comparisons, end to end.

This is the path a reader follows: case -> layout and pools -> ForwardBatch as
the scheduler fills it -> the backend entry builds sglang's backend -> the
runner form executes it -> each step's output against the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness import platform
from harness.backends import BACKENDS
from harness.batch import build_state
from harness.cases import Case
from harness.compare import Comparison, compare
from harness.forward_inputs import draw_inputs
from harness.kv_layout import build_layout
from harness.sglang_env import model_runner, server_fields, sglang_state
from runner_modes import MODES
from runner_modes.eager import run_eager

RUNNERS = {"eager": run_eager}


class CellSkipped(Exception):
    """The cell cannot run here; the message is the reason a report shows."""


@dataclass(frozen=True)
class CellResult:
    comparisons: list[Comparison]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    @property
    def worst(self) -> Comparison:
        return max(self.comparisons, key=lambda c: (not c.ok, c.mismatch_frac, c.max_abs_err))

    def describe(self) -> str:
        bad = [f"step {i}: {c.describe()}" for i, c in enumerate(self.comparisons) if not c.ok]
        return "; ".join(bad) or self.worst.describe()


def skip_reason(case: Case, backend: str, runner: str) -> str | None:
    if runner not in RUNNERS:
        return f"runner form '{runner}' is not available yet"
    if runner == "cuda_graph" and not platform.HAS_GPU:
        return "CUDA-graph capture needs a GPU"
    return BACKENDS[backend].skip_reason(case.mode, case.spec)


def _check_host_mirrors(spec, backend: str, server_args, attn_backend) -> None:
    """Run GPU-only variants only where sglang's scheduler really takes that path.

    The scheduler drops seq_lens_cpu / seq_lens_sum only when no backend in
    play needs them; sglang decides that in decide_needs_cpu_seq_lens (#26128),
    which we ask rather than re-implement.
    """
    if spec.host_mirrors == "full":
        return
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    if decide_needs_cpu_seq_lens(server_args, [attn_backend]):
        raise CellSkipped(
            f"{backend} declares needs_cpu_seq_lens (or leaves it undeclared), so sglang's scheduler "
            "keeps seq_lens_cpu/seq_lens_sum for it: the GPU-only path never reaches it "
            "(decide_needs_cpu_seq_lens, sglang PR #26128)")


def run_cell(case: Case, backend: str, runner: str) -> CellResult:
    reason = skip_reason(case, backend, runner)
    if reason:
        raise CellSkipped(reason)
    from sglang.srt.layers.radix_attention import RadixAttention

    platform.check_sglang_version()
    mode, spec, entry = MODES[case.mode], case.spec, BACKENDS[backend]
    row_lens = mode.row_lens(spec)
    layout = build_layout(spec.kv_layout, row_lens, spec.page_size, spec.seed)
    fields = server_fields(spec, entry.server_arg, mode.num_draft_tokens(spec))
    with sglang_state(fields) as server_args:
        state = build_state(spec, layout, row_lens, platform.DEVICE)
        runner_obj = model_runner(spec, state.pools, server_args, platform.DEVICE,
                                  is_draft_worker=mode.backend_role != "target")
        attn_backend = entry.build(mode.backend_role, runner_obj, spec)
        _check_host_mirrors(spec, backend, server_args, attn_backend)
        scale = spec.head_dim ** -0.5
        layer = RadixAttention(spec.num_heads, spec.head_dim, scale, spec.num_kv_heads, layer_id=0)
        steps = mode.steps(spec)
        inputs = draw_inputs(state, steps, scale)
        forward_batch = mode.forward_batch(state, steps)
        outputs = RUNNERS[runner](mode, attn_backend, forward_batch, inputs, layer)
    shape = (-1, spec.num_heads, spec.head_dim)
    return CellResult([compare(out.reshape(shape), step_in.expected, spec.dtype, step.labels)
                       for out, step_in, step in zip(outputs, inputs, steps)])
