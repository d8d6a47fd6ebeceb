"""DRAFT_EXTEND_V2: the draft model refills its KV for a fixed window per request.

Production contract (sglang 0.5.17, eagle_worker_common.prepare_for_draft_extend,
established by sglang PR #26651): the forward sees seq_lens = prefix + window
(the post-write length), extend_prefix_lens = prefix, extend_seq_lens = window,
causal attention within the window. On the GPU-only path seq_lens_cpu,
seq_lens_sum and extend_prefix_lens_cpu are None, while extend_seq_lens_cpu is
still supplied ([window] * bs) so backends need no device sync.
"""

from __future__ import annotations

import copy

from typing import TYPE_CHECKING

import torch

from harness.checks.reference import Query
from harness.modes.base import (ForwardStep, WindowedMode, base_fields, fixed_window_problem,
                                 host_mirror, visible_spans)

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec


class DraftExtendV2(WindowedMode):
    name = "draft_extend_v2"
    backend_role = "draft"
    forward_mode = "DRAFT_EXTEND_V2"
    takes_draft_window = False

    def validate(self, case: CaseSpec) -> str | None:
        return fixed_window_problem(case, "the draft-extend window per request",
                                    "DRAFT_EXTEND_V2 fills a fixed window per request")

    def steps(self, spec: CaseSpec) -> list[ForwardStep]:
        window = self.num_draft_tokens(spec)
        queries, writes, labels = [], [], []
        for request, prefix in enumerate(spec.prefix_lens):
            for token in range(window):
                queries.append(Query(request, visible_spans(spec, prefix + token, (range(prefix + token + 1),))))
                writes.append((request, prefix + token))
                labels.append(f"request {request} extend token {token}")
        return [ForwardStep(queries, writes, labels)]

    def forward_batch(self, state, steps: list[ForwardStep]):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

        spec = state.spec
        window = self.num_draft_tokens(spec)
        writes = steps[0].writes
        fields = base_fields(
            state, ForwardMode.DRAFT_EXTEND_V2,
            seq_lens=[p + window for p in spec.prefix_lens],
            out_slots=state.layout.slots_at(writes),
            num_tokens=len(writes), positions=[p for _, p in writes], spec_info=None, algorithm=self.spec_algorithm)
        fields["spec_info"] = EagleDraftExtendInput(
            positions=fields["positions"],
            num_accept_tokens=torch.full((spec.bs,), window, dtype=torch.int32, device=state.device),
            num_tokens_per_req=window,
        )
        extend_lens = [window] * spec.bs
        fields.update(
            extend_num_tokens=len(writes),
            extend_prefix_lens=state.tensor(spec.prefix_lens, torch.int32),
            extend_seq_lens=state.tensor(extend_lens, torch.int32),
            extend_start_loc=state.tensor([window * r for r in range(spec.bs)], torch.int32),
            extend_prefix_lens_cpu=host_mirror(state, list(spec.prefix_lens)),
            extend_seq_lens_cpu=host_mirror(state, extend_lens, kept_on_gpu_only=True),
        )
        return ForwardBatch(**fields)

    def step_views(self, backend, forward_batch):
        return [(backend, forward_batch)]

    def capture_spec_info(self, spec_info, static, tokens_per_request: int):
        return self.replay_spec_info(spec_info, static, tokens_per_request)

    def replay_spec_info(self, spec_info, static, tokens_per_request: int):
        """As EAGLEDraftExtendCudaGraphRunner.execute: padded window lengths on spec_info."""
        padded = copy.copy(spec_info)
        window = torch.full((static.batch_size,), tokens_per_request, dtype=torch.int32,
                            device=static.seq_lens.device)
        padded.num_correct_drafts = window
        padded.num_accept_tokens = window
        padded.positions = static.positions
        padded.extend_seq_lens_tensor = static.extend_seq_lens
        padded.extend_seq_lens_cpu = [tokens_per_request] * static.batch_size
        return padded


MODE = DraftExtendV2()
