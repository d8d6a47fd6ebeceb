"""CUDA-graph forms: capture once on sglang's dummy batch, replay on several real batches, padded.

Mirrors sglang's graph runners (0.5.17's cuda_graph_runner and eagle draft runners, 0.5.23's
decode_cuda_graph_runner): init_cuda_graph_state(max_bs, max_num_tokens);
out_graph(in_capture=True) on a batch of fill rows; two eager warm-up passes; capture of
in_graph + the forwards. Then, for every replay, what the runners do before each
graph.replay(): the batch copied into the same static buffers (padded as the runner pads),
init_forward_metadata_out_graph on them. Nothing is reset between replays that the runners do
not reset, so state one replay leaves behind reaches the next. Capture output is warm-up and is
never asserted.

The cg_meta form runs the same hooks on the same static buffers but executes the forwards
eagerly instead of capturing them: what a replayed graph would compute for backends whose
kernels read only those buffers (Triton), and runnable on CPU under Triton's interpreter, so
CUDA-graph metadata bugs are caught in CI. It never claims to have captured a graph.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from harness.families import BACKENDS
from harness.fixtures.pools import StepInputs
from harness.checks.graph_buffers import check_declared, guard_graph_buffers, reachable_memory
from harness.checks.guards import Guards
from harness.checks.host_sync import UNGUARDED, SyncLog
from harness.checks.invariants import check_backend, check_graph_capacity
from harness.modes.base import SpecMode
from harness.runners.padding import HOST_FIELDS, PADDED_ROW, ROW_FIELDS, padded_batch


@dataclass(frozen=True)
class GraphPlan:
    backend: str  # entry name in harness.families.BACKENDS (its declared graph buffers)
    capture_bs: int
    capture: bool  # False: cg_meta form, the same hooks and buffers with eager forwards
    topk: int
    context_len: int
    multi_step: bool  # draft decode: one kv_indices row per step, topk branches per request
    tokens_per_request: int  # query tokens each request brings (SpecMode.tokens_per_request)


def fill_value(backend) -> int:
    """sglang reads the multi-step backend's fill value off its first step backend."""
    inner = getattr(backend, "attn_backends", [backend])[0]
    return inner.get_cuda_graph_seq_len_fill_value()


class CapturedGraph:
    """One backend's graph state, captured once; ``replay`` runs it on any batch that fits."""

    def __init__(self, mode: SpecMode, backend, layer, plan: GraphPlan, template, inputs: list[StepInputs], attend,
                 sync_log: SyncLog = UNGUARDED):
        """``template``: a real batch (its fields and spec_info shape the static batch);
        ``inputs``: its step inputs (their shapes, the static Q/K/V's); ``attend``: one forward as the
        family's model calls the backend (AttentionFamily.forward); ``sync_log``: where each replay's
        metadata init records its host syncs."""
        self.mode, self.backend, self.layer, self.plan, self.attend = mode, backend, layer, plan, attend
        self.sync_log = sync_log
        self.fill = fill_value(backend)
        self.static = self._capture_batch(template)
        rows = plan.capture_bs * plan.tokens_per_request
        before = reachable_memory(backend)
        backend.init_cuda_graph_state(plan.capture_bs, rows)
        check_graph_capacity(backend, plan.capture_bs, plan.topk, plan.context_len, plan.multi_step,
                             BACKENDS[plan.backend].graph_block_table_page)
        self.guards = Guards()
        guarded = guard_graph_buffers(self.guards, backend, before)
        check_declared(guarded, BACKENDS[plan.backend].graph_buffers.value, plan.backend)

        def zeros_like_rows(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else torch.zeros((rows, *t.shape[1:]), dtype=t.dtype, device=t.device)

        self.q = [zeros_like_rows(s.q) for s in inputs]
        self.k = [zeros_like_rows(s.k) for s in inputs]
        self.v = [zeros_like_rows(s.v) for s in inputs]
        self.out_buffers = [self.guards.guarded(f"step {i} attention output", (rows, s.output_shape[1]), s.q.dtype,
                                                s.q.device) for i, s in enumerate(inputs)]
        self.outputs = None  # the captured graph's output tensors (capture form only)

    def _capture_batch(self, template):
        """The graph's static ForwardBatch: capture-size buffers holding sglang's capture dummy,
        every row a fill row (padding.py's values for a padded row)."""
        static = copy.copy(template)
        capture_bs, per_request = self.plan.capture_bs, self.plan.tokens_per_request
        for name in ROW_FIELDS:
            tensor = getattr(template, name)
            if tensor is not None:
                per_row = tensor.numel() // template.batch_size
                setattr(static, name, torch.full((capture_bs * per_row,), PADDED_ROW[name](self.fill, per_request),
                                                 dtype=tensor.dtype, device=tensor.device))
        static.input_ids = torch.zeros(capture_bs * per_request, dtype=torch.int64, device=template.seq_lens.device)
        static.batch_size = capture_bs
        if static.seq_lens_cpu is not None:
            static.seq_lens_cpu = torch.full((capture_bs,), self.fill, dtype=template.seq_lens_cpu.dtype)
            static.seq_lens_sum = capture_bs * self.fill
        for name in ("extend_seq_lens_cpu", "extend_prefix_lens_cpu"):
            if getattr(template, name) is not None:
                setattr(static, name, [PADDED_ROW[name.removesuffix("_cpu")](self.fill, per_request)] * capture_bs)
        static.spec_info = self.mode.capture_spec_info(template.spec_info, static, per_request)
        return static

    def _run_once(self) -> list[torch.Tensor]:
        self.backend.init_forward_metadata_in_graph(self.static)
        outputs = []
        for i, (step_backend, view) in enumerate(self.mode.step_views(self.backend, self.static)):
            view._attn_output = self.out_buffers[i]
            outputs.append(self.attend(step_backend, self.q[i], self.k[i], self.v[i], self.layer, view,
                                       self.k[i] is not None))
        return outputs

    def capture(self) -> None:
        self.backend.init_forward_metadata_out_graph(self.static, in_capture=True)
        check_backend(self.backend, "capture init_forward_metadata_out_graph", self.guards.capacity)
        if self.plan.capture:
            for _ in range(2):  # sglang warms up twice before capturing
                self._run_once()
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = self._run_once()
        self.guards.check("after capture")

    def _load(self, padded) -> None:
        """Copy a padded batch into the static buffers, as the runner does before each replay."""
        for name in ROW_FIELDS:
            tensor = getattr(padded, name)
            if tensor is not None:
                getattr(self.static, name).copy_(tensor)
        for name in HOST_FIELDS:
            setattr(self.static, name, getattr(padded, name))
        self.static.spec_info = self.mode.replay_spec_info(padded.spec_info, self.static, self.plan.tokens_per_request)

    def replay(self, forward_batch, step_inputs: list[StepInputs], label: str) -> list[torch.Tensor]:
        """Each step's output for the batch's own rows; ``label`` names this replay in messages."""
        self._load(padded_batch(forward_batch, self.plan.capture_bs, self.fill, self.plan.tokens_per_request))
        for i, inputs in enumerate(step_inputs):
            n = inputs.q.shape[0]
            for static_t, real_t in ((self.q[i], inputs.q), (self.k[i], inputs.k), (self.v[i], inputs.v)):
                if static_t is not None:  # a forward that writes no KV hands the backend none
                    static_t.zero_()
                    static_t[:n].copy_(real_t)
            self.out_buffers[i].fill_(float("nan"))
        with self.sync_log.guard(f"{label} init_forward_metadata_out_graph"):
            self.backend.init_forward_metadata_out_graph(self.static)
        check_backend(self.backend, f"{label} init_forward_metadata_out_graph (padded to {self.plan.capture_bs})",
                      self.guards.capacity)
        if self.plan.capture:
            self.graph.replay()
            torch.cuda.synchronize()
            outputs = self.outputs
        else:
            outputs = self._run_once()
        self.guards.check(f"after {label}")
        return [out[: s.q.shape[0]].clone() for out, s in zip(outputs, step_inputs)]

