"""Multi-step draft decode: topk branches per request, one token each per step.

Production contract (sglang 0.5.17 and 0.5.23 alike, eagle_worker_common.prepare_for_draft and
generate_draft_decode_kv_indices): one ForwardBatch in DECODE mode covers all steps; seq_lens =
committed prefix; positions = prefix repeated per branch; out_cache_loc holds bs * topk *
num_steps slots, ordered (request, branch, step). Step s (0 .. num_steps - 2) runs on the
multi-step backend's s-th backend; each branch's query sees the prefix and its own branch's
tokens 0..s (its own token included, written by this step), the token of step s sitting at
model position prefix + s; a model window (sliding_window) keeps the keys within it of position
prefix + s.

Where branch k of a request with an L-token prefix keeps its tokens in the request's
req_to_token row (branch_start):

- page_size 1, or a chain (topk 1): back to back after the prefix, at L + k * num_steps + s
  (kernels/ops/speculative/cache_locs.py assign_draft_cache_locs_contiguous, the
  ``page_size == 1 or topk == 1`` branch of prepare_for_draft).
- page_size P > 1 with topk > 1 (the paged tree): every branch owns whole pages of its own. With
  tail = L % P and base = L - tail, each branch takes pages = ceil((tail + num_steps) / P) pages,
  branch k's from row position base + k * pages * P, and its step-s token sits at
  base + k * pages * P + tail + s (prepare_for_draft's ``page_size > 1 + topk > 1`` branch, which
  gathers out_cache_loc from exactly these positions; generate_draft_decode_kv_indices reads the
  branch's tokens from the same formula, its ``else`` branch of ``page_size == 1 or topk == 1``).
  Branch 0's first page is the prefix's own last page; for branch k >= 1 the first ``tail``
  positions of its region are holes, which the worker fills with a copy of the prefix's tail
  K/V (eagle_worker_common.duplicate_prefix_tail_to_draft_branches, after sglang V1 #7725), so
  that a backend reading a branch by whole pages (FA3's expand pass: flashattention_backend
  init_forward_metadata, ``cache_seqlens -= last_page_lens`` for the prefix pass and
  draft_decode_set_expand_metadata for the branch pass from its first page's offset 0) reads
  the prefix tail there. The row is whole pages (the scheduler allocates page-aligned lengths:
  allocation_sizing.page_aligned_decode_alloc_lens, eagle_utils.eagle_prepare_for_decode), and
  sglang widens each req_to_token row for it (allocation_sizing.get_alloc_len_per_decode's
  ``num_new_pages_per_topk`` reserve, get_req_to_token_extra_context_len; harness/fixtures/pools.py asks
  for that width). forward_batch makes the same copy, in the pool and in the harness's copy of
  the K/V, so the holes hold the very values of the prefix tail; the reference still reads, per
  query, the prefix and its own branch's tokens by row position. sglang serves the paged tree
  on the Triton, FlashInfer and FA3 backends only (arg_groups/speculative_hook.py
  _handle_eagle_family, ``_PAGE_TREE_SPEC_BACKENDS``); the backend entries say so.

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

from harness.checks.reference import Query
from harness.modes.base import (EAGLE_MOST_COMMITTED_WHY, ForwardStep, ModeDefaults, base_fields,
                                 eagle_most_committed, eagle_speculative_args, visible_spans)

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec


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
        if not self.paged_tree(spec):
            return [p + spec.topk * spec.num_steps for p in spec.prefix_lens]
        return [p - p % spec.page_size + spec.topk * self.branch_pages(spec, p) * spec.page_size
                for p in spec.prefix_lens]

    @staticmethod
    def paged_tree(spec: CaseSpec) -> bool:
        """Branches in pages of their own (see the module docstring)."""
        return spec.topk > 1 and spec.page_size > 1

    @staticmethod
    def branch_pages(spec: CaseSpec, prefix: int) -> int:
        """Pages each branch of a paged tree owns: the prefix's tail and num_steps tokens, rounded up."""
        return -(-(prefix % spec.page_size + spec.num_steps) // spec.page_size)

    def branch_start(self, spec: CaseSpec, request: int, branch: int) -> int:
        """Row position of the branch's step-0 token."""
        prefix = spec.prefix_lens[request]
        if not self.paged_tree(spec):
            return prefix + branch * spec.num_steps
        return prefix + branch * self.branch_pages(spec, prefix) * spec.page_size

    def branch_position(self, spec: CaseSpec, request: int, branch: int, step: int) -> int:
        return self.branch_start(spec, request, branch) + step

    def tail_copies(self, spec: CaseSpec, request: int) -> tuple[list[int], list[int]]:
        """(holes, sources): the row positions of a paged tree's branches k >= 1 that hold a copy
        of the prefix's tail, and the prefix positions each copies."""
        prefix = spec.prefix_lens[request]
        tail = prefix % spec.page_size if self.paged_tree(spec) else 0
        holes = [self.branch_start(spec, request, branch) - tail + offset
                 for branch in range(1, spec.topk) for offset in range(tail)]
        return holes, [prefix - tail + offset for _ in range(1, spec.topk) for offset in range(tail)]

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
        for request in range(spec.bs):  # the worker's duplicate_prefix_tail_to_draft_branches
            state.copy_kv(request, *self.tail_copies(spec, request))
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
