"""Frozen-KV MTP draft: a draft that owns no KV, decoding over the target's pool.

Production contract (sglang 0.5.23, speculative/frozen_kv_mtp_worker_v2.py
FrozenKVMTPDraftWorker.draft / draft_forward / _init_frozen_kv_metadata, and
frozen_kv_mtp_utils.py): ForwardBatch.init_new on the DECODE batch, then
set_frozen_kv_positions and expand_for_topk_draft (sglang's own, called here): with topk > 1
every request becomes topk rows (req_pool_indices, seq_lens and seq_lens_cpu repeated,
batch_size = bs x topk), positions = seq_lens - 1 per row. seq_lens is the committed prefix;
seq_lens_cpu the committed prefix or None (GPU-only path), while seq_lens_sum is never None (the
worker sums the device lengths when there is no mirror), so host_mirrors: none is refused.
out_cache_loc is None: the draft writes no KV. The metadata is built once, with spec_info None
(frozen_kv_target_view), and serves the seed forward and num_steps - 1 recurrent forwards (the
last step only selects tokens); each forward hands the backend a FrozenKVMTPDraftInput, k = v =
None and save_kv_cache=False (the assistant's layers are KV-shared: models/gemma4_causal.py).
Each row's query sees its request's committed prefix and nothing else.

The backend: for topk 1 the draft model runner's own (the entry's single-step class); for
topk > 1 _init_draft_attn_backend builds TritonAttnBackend(skip_prefill=True) with a
kv_indptr buffer of req_to_token_pool.size x topk + 1 (or trtllm_mha) and raises ValueError
for any other backend. Production builds it on a 64-token dummy draft pool and swaps the target
pool in around every metadata init and forward (frozen_kv_target_view, target_kv_pool_view);
here it is built on the target pool, which is what it reads. The graph runner
(frozen_kv_mtp_cuda_graph_runner.py) calls init_cuda_graph_state(max_bs x topk, max_bs x topk)
and pads the expanded rows with the fill seq_len, pool row 0 and position 0; it captures one-step
drafts from 0.5.23 on (before, _capture_cuda_graphs returned for speculative_num_steps <= 1).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from harness.modes.base import BuildBackend, ForwardStep, ModeDefaults, base_fields, eagle_speculative_args
from harness.modes.draft_decode import MODE as DRAFT_DECODE
from harness.checks.reference import Query, spans_of
from harness.base.releases import installed, since

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec

# frozen_kv_mtp_worker_v2._init_draft_attn_backend: the backends it builds for topk > 1.
TOPK_DRAFT_BACKENDS = ("triton", "trtllm_mha")
# The fewest draft steps for which FrozenKVMTPDraftWorker._capture_cuda_graphs captures a graph.
GRAPH_MIN_STEPS = since({"0.5.17": 2, "0.5.23": 1})


class FrozenKVMTPDraft(ModeDefaults):
    name = "frozen_kv_mtp_draft"
    backend_role = "draft"
    spec_algorithm = "FROZEN_KV_MTP"
    forward_mode = "DECODE"
    min_prefix_len = 1  # a decoding request holds at least its first token

    def validate(self, case: CaseSpec) -> str | None:
        if case.sliding_window:
            return ("sliding_window: the frozen-KV draft reads the target's KV at the target's layers; a "
                    "window over it is not modelled here (the verify side takes it)")
        if case.input_lens is not None:
            return "input_lens: the frozen-KV draft brings topk query rows per request; drop input_lens"
        if min(case.prefix_lens) < self.min_prefix_len:
            return "prefix_lens: a decoding request has at least 1 committed token for the draft to read"
        if case.host_mirrors == "none":
            return ("host_mirrors: the frozen-KV draft always computes seq_lens_sum (from the device lengths "
                    "without a mirror); 'none' is no state it produces, use gpu_only")
        return None

    def worker_skip_reason(self, server_arg: str, graph: bool, spec: CaseSpec) -> str | None:
        if spec.topk > 1 and server_arg not in TOPK_DRAFT_BACKENDS:
            return (f"Frozen-KV MTP topk > 1 drafts on {' or '.join(TOPK_DRAFT_BACKENDS)} only: "
                    f"frozen_kv_mtp_worker_v2._init_draft_attn_backend raises ValueError for {server_arg}")
        if graph and spec.num_steps < GRAPH_MIN_STEPS.value:
            return (f"sglang {installed().contracts} captures no Frozen-KV MTP draft graph for a "
                    f"{spec.num_steps}-step draft (_capture_cuda_graphs); it runs eagerly")
        return None

    def build_backend(self, build: BuildBackend, model_runner, spec: CaseSpec):
        if spec.topk == 1:
            return build(self.backend_role, model_runner, spec)
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        kv_indptr = torch.zeros(model_runner.req_to_token_pool.size * spec.topk + 1, dtype=torch.int32,
                                device=model_runner.device)
        return TritonAttnBackend(model_runner, skip_prefill=True, kv_indptr_buf=kv_indptr)

    def speculative_args(self, spec: CaseSpec) -> dict:
        return eagle_speculative_args(spec, self.num_draft_tokens(spec), self.spec_algorithm)

    def num_draft_tokens(self, spec: CaseSpec) -> int:
        return DRAFT_DECODE.num_draft_tokens(spec)  # the same EAGLE tree

    def row_lens(self, spec: CaseSpec) -> list[int]:
        return list(spec.prefix_lens)

    def query_tokens(self, spec: CaseSpec) -> list[int]:
        return [spec.topk * spec.num_steps] * spec.bs

    def steps(self, spec: CaseSpec) -> list[ForwardStep]:
        """The seed forward, then num_steps - 1 recurrent ones: topk rows a request, its prefix each."""
        steps = []
        for step in range(spec.num_steps):
            queries, labels = [], []
            for request, prefix in enumerate(spec.prefix_lens):
                for branch in range(spec.topk):
                    queries.append(Query(request, spans_of(range(prefix))))
                    labels.append(f"forward {step} request {request} row {branch}")
            steps.append(ForwardStep(queries, [], labels))
        return steps

    def forward_batch(self, state, steps: list[ForwardStep]):
        """The batch metadata is built from: expanded, no out_cache_loc, spec_info None."""
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
        from sglang.srt.speculative.frozen_kv_mtp_utils import expand_for_topk_draft, set_frozen_kv_positions

        spec = state.spec
        fields = base_fields(state, ForwardMode.DECODE, seq_lens=list(spec.prefix_lens),
                             out_slots=torch.empty(0, dtype=torch.int64), num_tokens=spec.bs,
                             positions=list(spec.prefix_lens), spec_info=None, algorithm=self.spec_algorithm)
        batch = ForwardBatch(**fields)
        set_frozen_kv_positions(batch, spec.topk)
        expand_for_topk_draft(batch, spec.topk)
        batch.out_cache_loc = None
        batch.input_ids = torch.zeros(batch.batch_size, dtype=torch.int64, device=state.device)
        # _init_frozen_kv_metadata: the sum of the mirror, else of the device lengths.
        lengths = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
        batch.seq_lens_sum = int(lengths.sum())
        return batch

    def step_views(self, backend, forward_batch):
        """Every forward on the one metadata, each with the draft input the worker's batch carries.

        topk and the step count are read where the worker reads them (get_spec(), inside the
        cell's server-args state).
        """
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.runtime_context import get_spec
        from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput

        topk, forwards = get_spec().speculative_eagle_topk, get_spec().speculative_num_steps
        view = copy.copy(forward_batch)
        view.spec_info = FrozenKVMTPDraftInput(capture_hidden_mode=CaptureHiddenMode.LAST, num_tokens_per_req=topk,
                                               num_tokens_for_logprob_per_req=topk)
        return [(backend, view)] * forwards

    def tokens_per_request(self, spec: CaseSpec) -> int:
        return 1

    def rows_per_request(self, spec: CaseSpec) -> int:
        return spec.topk

    def capture_spec_info(self, spec_info, static, tokens_per_request: int):
        return None  # metadata is built with spec_info None (frozen_kv_target_view)

    def replay_spec_info(self, spec_info, static, tokens_per_request: int):
        return None


MODE = FrozenKVMTPDraft()
