"""CUDA-graph forms: capture on sglang's dummy batch, replay on the real one, padded.

Mirrors sglang 0.5.17's graph runners: init_cuda_graph_state(max_bs,
max_num_tokens); out_graph(in_capture=True) on a batch of fill rows; two eager
warm-up passes; capture of in_graph + the forwards; then, per replay, the real
batch copied into the same static buffers (padded as the runner pads),
out_graph(in_capture=False) and graph.replay(). Capture output is warm-up and
is never asserted.

The cg_meta form runs the same hooks on the same static buffers but executes
the forwards eagerly instead of capturing them: what a replayed graph would
compute for backends whose kernels read only those buffers (Triton), and
runnable on CPU under Triton's interpreter, so CUDA-graph metadata bugs are
caught in CI. It never claims to have captured a graph.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from harness.forward_inputs import StepInputs
from harness.backends import BACKENDS
from harness.graph_buffers import check_declared, guard_graph_buffers, reachable_memory
from harness.guards import Guards
from harness.invariants import check_backend, check_graph_capacity
from harness.runners.padding import pad_rows, padded_host_fields


@dataclass(frozen=True)
class GraphPlan:
    backend: str  # entry name in harness/backends.py (its declared graph buffers)
    capture_bs: int
    capture: bool  # False: cg_meta form, the same hooks and buffers with eager forwards
    topk: int
    context_len: int
    multi_step: bool  # draft decode: one kv_indices row per step, topk branches per request


def fill_value(backend) -> int:
    """sglang reads the multi-step backend's fill value off its first step backend."""
    inner = getattr(backend, "attn_backends", [backend])[0]
    return inner.get_cuda_graph_seq_len_fill_value()


def _static_batch(mode, real_fb, capture_bs: int, fill: int, tokens_per_request: int):
    """The graph's static ForwardBatch, holding sglang's capture dummy rows."""
    static = copy.copy(real_fb)
    for name, tensor in pad_rows(real_fb, capture_bs, fill, tokens_per_request).items():
        if tensor is not None:
            setattr(static, name, tensor.clone())
    for name, value in padded_host_fields(real_fb, capture_bs, fill, tokens_per_request).items():
        setattr(static, name, value)
    static.input_ids = torch.zeros(capture_bs * tokens_per_request, dtype=torch.int64,
                                   device=real_fb.seq_lens.device)
    static.req_pool_indices.zero_()
    static.seq_lens.fill_(fill)
    static.positions.zero_()
    static.out_cache_loc.zero_()
    if static.extend_seq_lens is not None:
        static.extend_seq_lens.fill_(tokens_per_request)
        static.extend_prefix_lens.zero_()
    if static.seq_lens_cpu is not None:
        static.seq_lens_cpu.fill_(fill)
        static.seq_lens_sum = capture_bs * fill
    static.spec_info = mode.capture_spec_info(real_fb.spec_info, static, tokens_per_request)
    return static


def _load_replay(mode, static, real_fb, capture_bs: int, fill: int, tokens_per_request: int) -> None:
    """Copy the real batch into the static buffers, padded as the runner pads it."""
    for name, tensor in pad_rows(real_fb, capture_bs, fill, tokens_per_request).items():
        if tensor is not None:
            getattr(static, name).copy_(tensor)
    for name, value in padded_host_fields(real_fb, capture_bs, fill, tokens_per_request).items():
        setattr(static, name, value)
    static.spec_info = mode.replay_spec_info(real_fb.spec_info, static, tokens_per_request)


def run_cuda_graph(mode, backend, real_fb, step_inputs: list[StepInputs], layer, plan: GraphPlan,
                   tokens_per_request: int) -> list[torch.Tensor]:
    capture_bs = plan.capture_bs
    fill = fill_value(backend)
    static = _static_batch(mode, real_fb, capture_bs, fill, tokens_per_request)
    rows = capture_bs * tokens_per_request
    before = reachable_memory(backend)
    backend.init_cuda_graph_state(capture_bs, rows)
    check_graph_capacity(backend, capture_bs, plan.topk, plan.context_len, plan.multi_step)
    guards = Guards()
    guarded = guard_graph_buffers(guards, backend, before)
    check_declared(guarded, BACKENDS[plan.backend].graph_buffers.value, plan.backend)

    def zeros_like_rows(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros((rows, *t.shape[1:]), dtype=t.dtype, device=t.device)

    q = [zeros_like_rows(s.q) for s in step_inputs]
    k = [zeros_like_rows(s.k) for s in step_inputs]
    v = [zeros_like_rows(s.v) for s in step_inputs]
    out_buffers = [guards.guarded(f"step {i} attention output", tuple(buf.shape), buf.dtype, buf.device)
                   for i, buf in enumerate(q)]

    def run_once():
        backend.init_forward_metadata_in_graph(static)
        outputs = []
        for i, (step_backend, view) in enumerate(mode.step_views(backend, static)):
            view._attn_output = out_buffers[i]
            outputs.append(step_backend.forward(q[i], k[i], v[i], layer, view))
        return outputs

    backend.init_forward_metadata_out_graph(static, in_capture=True)
    check_backend(backend, "capture init_forward_metadata_out_graph", guards.capacity)
    if plan.capture:
        for _ in range(2):  # sglang warms up twice before capturing
            run_once()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            graph_outputs = run_once()
    guards.check("after capture")

    _load_replay(mode, static, real_fb, capture_bs, fill, tokens_per_request)
    for i, inputs in enumerate(step_inputs):
        n = inputs.q.shape[0]
        for static_t, real_t in ((q[i], inputs.q), (k[i], inputs.k), (v[i], inputs.v)):
            static_t.zero_()
            static_t[:n].copy_(real_t)
        out_buffers[i].fill_(float("nan"))
    backend.init_forward_metadata_out_graph(static)
    check_backend(backend, f"replay init_forward_metadata_out_graph (bs {real_fb.batch_size} padded to {capture_bs})",
                  guards.capacity)
    if plan.capture:
        graph.replay()
        torch.cuda.synchronize()
    else:
        graph_outputs = run_once()
    guards.check("after replay")
    return [out[: s.q.shape[0]].clone() for out, s in zip(graph_outputs, step_inputs)]
