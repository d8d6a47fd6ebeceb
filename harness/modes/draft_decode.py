"""Multi-step draft decode: topk branches per request, one token each per step.

Production contract (sglang 0.5.17, eagle_worker_common.prepare_for_draft and
generate_draft_decode_kv_indices): one ForwardBatch in DECODE mode covers all
steps; seq_lens = committed prefix; positions = prefix repeated per branch;
out_cache_loc holds bs * topk * num_steps slots, branch k of request b owning
row positions prefix + k * num_steps + s. Step s (0 .. num_steps - 2) runs on
the multi-step backend's s-th backend; each branch's query sees the prefix and
its own branch's tokens 0..s (its own token included, written by this step),
the token of step s sitting at model position prefix + s; a model window
(sliding_window) keeps the keys within it of position prefix + s.

A committed prefix of 0 is a state production never reaches here (sglang 0.5.23): the draft
runs on the committed length (eagle_worker_common.prepare_for_draft builds the batch on
batch.seq_lens); that length starts at the prompt length, since intake refuses an empty prompt
(io_struct.GenerateReqInput._determine_batch_size: "input_ids cannot be empty") and prefill
computes at least one token (schedule_batch.Req._compute_max_prefix_len: input_len - 1); each
verify then adds accept_lens >= 1 (eagle_utils.eagle_sample: num_correct_drafts + 1, added in
eagle_worker_common.run_eagle_verify); CUDA-graph padding rows use seq_len 1
(TritonAttnBackend.get_cuda_graph_seq_len_fill_value). Triton's kernels divide by the
shortest length (kernels/ops/attention/metadata.py get_num_kv_splits_triton), so a 0 gives NaN
that no server ever sees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.reference import Query
from harness.modes.base import (EAGLE_MOST_COMMITTED_WHY, ForwardStep, ModeDefaults, base_fields,
                                 eagle_most_committed, eagle_speculative_args, visible_spans)

if TYPE_CHECKING:
    from harness.cases import CaseSpec


class DraftDecode(ModeDefaults):
    name = "draft_decode"
    backend_role = "draft_multi_step"
    spec_algorithm = "EAGLE"
    forward_mode = "DECODE"
    takes_draft_window = True
    min_prefix_len = 1  # the prompt's one token at least: see the module docstring
    most_committed_why = EAGLE_MOST_COMMITTED_WHY

    def most_committed(self, num_steps: int, window: int | None) -> int:
        return eagle_most_committed(num_steps, None)  # its verify window is at least num_steps + 1 tokens

    def validate(self, case: CaseSpec) -> str | None:
        if case.input_lens is not None:
            return "input_lens: draft_decode takes topk tokens per request per step; drop input_lens"
        short = [index + 1 for index, prefix in enumerate(case.prefix_lens) if prefix < self.min_prefix_len]
        if short:
            return (f"prefix_lens: item {short[0]} is 0, a length production never reaches in draft decode: "
                    "the draft runs on the committed length, at least the prompt's one token (sglang refuses "
                    "empty prompts, every verify commits one token or more, graph padding rows use seq_len 1); "
                    f"give every request a prefix >= {self.min_prefix_len}")
        if case.num_steps < 2:
            return "num_steps: draft_decode runs num_steps - 1 attention steps, so it needs num_steps >= 2"
        if case.topk > 1 and case.page_size > 1:
            return "page_size: draft_decode with topk > 1 supports page_size 1 only in this harness"
        if case.draft_sink and not case.draft_window:
            return "draft_sink: sglang takes --speculative-draft-sink-size only with a draft_window"
        return None

    def visible_prefix(self, spec: CaseSpec, prefix: int) -> tuple[range, ...]:
        """Prefix positions a draft query reads: all, or the sink plus the recent window.

        As generate_draft_decode_kv_indices (sglang 0.5.21+): with window w and
        sink s over a prefix of L tokens, the first min(s, L) tokens and the
        last min(L, w + s) - min(s, L) tokens.
        """
        if not spec.draft_window:
            return (range(prefix),)
        sink = min(spec.draft_sink, prefix)
        recent = min(prefix, spec.draft_window + spec.draft_sink) - sink
        return (range(sink), range(prefix - recent, prefix))

    def speculative_args(self, spec: CaseSpec) -> dict:
        return eagle_speculative_args(spec, self.num_draft_tokens(spec))

    def num_draft_tokens(self, spec: CaseSpec) -> int:
        return spec.topk * spec.num_steps + 1 if spec.topk > 1 else spec.num_steps + 1

    def row_lens(self, spec: CaseSpec) -> list[int]:
        return [p + spec.topk * spec.num_steps for p in spec.prefix_lens]

    def branch_position(self, spec: CaseSpec, request: int, branch: int, step: int) -> int:
        return spec.prefix_lens[request] + branch * spec.num_steps + step

    def steps(self, spec: CaseSpec) -> list[ForwardStep]:
        steps = []
        for step in range(spec.num_steps - 1):
            queries, writes, labels = [], [], []
            for request, prefix in enumerate(spec.prefix_lens):
                for branch in range(spec.topk):
                    # the branch's token of step s: its row, and model position prefix + s
                    own = tuple((self.branch_position(spec, request, branch, s), prefix + s) for s in range(step + 1))
                    seen = visible_spans(spec, prefix + step, self.visible_prefix(spec, prefix), own)
                    queries.append(Query(request, seen))
                    writes.append((request, own[-1][0]))
                    labels.append(f"step {step} request {request} branch {branch}")
            steps.append(ForwardStep(queries, writes, labels))
        return steps

    def forward_batch(self, state, steps: list[ForwardStep]):
        from sglang.srt.model_executor.forward_batch_info import (
            CaptureHiddenMode, ForwardBatch, ForwardMode)
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        spec = state.spec
        out_slots = state.layout.slots_at([(r, self.branch_position(spec, r, k, s)) for r in range(spec.bs)
                                           for k in range(spec.topk) for s in range(spec.num_steps)])
        positions = [p for p in spec.prefix_lens for _ in range(spec.topk)]
        spec_info = EagleDraftInput(capture_hidden_mode=CaptureHiddenMode.LAST,
                                    num_tokens_per_req=spec.topk,
                                    num_tokens_for_logprob_per_req=spec.topk)
        fields = base_fields(state, ForwardMode.DECODE, seq_lens=list(spec.prefix_lens),
                             out_slots=out_slots, num_tokens=spec.bs * spec.topk,
                             positions=positions, spec_info=spec_info, algorithm=self.spec_algorithm)
        spec_info.positions = fields["positions"]
        return ForwardBatch(**fields)

    def step_views(self, backend, forward_batch):
        """Per step: that step's backend and the batch writing that step's slots."""
        import copy

        spec_bs, topk = forward_batch.batch_size, forward_batch.spec_info.num_tokens_per_req
        per_step = (forward_batch.out_cache_loc.view(spec_bs, topk, -1)
                    .permute(2, 0, 1).reshape(-1, spec_bs * topk))
        views = []
        for step, step_backend in enumerate(backend.attn_backends):
            view = copy.copy(forward_batch)
            view.out_cache_loc = per_step[step].contiguous()
            views.append((step_backend, view))
        return views

    def tokens_per_request(self, spec: CaseSpec) -> int:
        return spec.topk

    def capture_spec_info(self, spec_info, static, tokens_per_request: int):
        return spec_info

    def replay_spec_info(self, spec_info, static, tokens_per_request: int):
        return spec_info


MODE = DraftDecode()
