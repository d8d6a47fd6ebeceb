"""DFlash verify: the target model scores a block of draft tokens per request, as a chain.

Production contract (sglang 0.5.23, speculative/dflash_worker_v2.py
DFlashWorkerV2.forward_batch_generation, step "2) Target verify", and dflash_info.py
DFlashVerifyInput.prepare_for_verify): a TARGET_VERIFY forward whose spec_info is a
DFlashVerifyInput with topk 1 and custom_mask None ("TARGET_VERIFY uses standard causal
masking"): each block token sees the committed prefix and the block up to itself. The device
seq_lens is the committed prefix; the block's K/V arrive with the forward and are written at
out_cache_loc, row positions prefix .. prefix + block - 1 (assign_extend_cache_locs over
req_to_token), positions prefix + j.

The host mirrors are not the prefix. Before ForwardBatch.init_new the worker sets
batch.seq_lens_cpu = committed + block ("verify host bound") and seq_lens_sum to its sum, so
seq_lens_cpu already counts the block while seq_lens does not; on the GPU-only path (no host
copy published, overlap_utils.FutureMap.resolve_seq_lens_cpu) it hands over the reservation
DFlashDraftInputV2.nxt_kv_lens_cpu instead. A backend that took kv lengths from the host mirror
would read block or more tokens past what the request holds (they are NaN here). The worker
never passes a None mirror, so host_mirrors: none is refused.

Each decode step reserves 2 x block KV slots per request (dflash_info_v2.py
DFlashDraftInputV2.prepare_for_decode, reserve = 2 * block_size), page-aligned from sglang
0.5.19 (page_aligned_decode_alloc_lens), plain committed + 2 x block before, from the committed
length the scheduler built the batch on (its host count lags the step in flight by one iteration:
scheduler_rules.batch_committed): a request's row holds the reservation, slots the allocator owns
that nothing has written. Where sglang's
req_to_token row is too narrow for it (page size 1: 4 + block columns past the context against a
reserve of 2 x block), the cell fails its row-capacity check (harness/checks/invariants.py), as
production writes the rest into the next request's row (findings/spec-reserve-past-req-to-token-row).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.modes.base import ForwardStep, WindowedMode, base_fields, fixed_window_problem, visible_spans
from harness.checks.reference import Query
from harness.base.releases import since
from harness.modes.scheduler_rules import batch_committed

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec


def _reserved_unaligned(prefix: int, block: int, page_size: int) -> int:
    """0.5.17-0.5.18: max(kv_allocated_len, committed + 2 x block), no page rounding."""
    return prefix + 2 * block


def _reserved_page_aligned(prefix: int, block: int, page_size: int) -> int:
    """0.5.19+: page_aligned_decode_alloc_lens(reserve=2 x block) rounds up to whole pages."""
    return -(-(prefix + 2 * block) // page_size) * page_size


# KV slots a request holds after prepare_for_decode, its committed prefix being all it held before.
RESERVED_LEN = since({"0.5.17": _reserved_unaligned, "0.5.19": _reserved_page_aligned})


def reserved_lens(spec: CaseSpec, block: int) -> list[int]:
    """Each request's reservation while a step runs on its committed prefix: reserved from the committed
    length the scheduler built the batch on (req.kv.kv_committed_len, which "intentionally lags by one
    iteration" under the overlap scheduler: scheduler_rules.batch_committed), not from the prefix the step
    in flight committed; the two differ past the non-overlap wall only."""
    return [RESERVED_LEN.value(batch_committed(prefix, spec.model_context_len), block, spec.page_size)
            for prefix in spec.prefix_lens]


class DFlashVerify(WindowedMode):
    name = "dflash_verify"
    backend_role = "target"
    spec_algorithm = "DFLASH"
    forward_mode = "TARGET_VERIFY"
    capture_hidden = "FULL"  # the target captures hidden states for the draft's next block
    # Host-mirror dtypes as the worker builds them: committed (int64) + block, or nxt_kv_lens_cpu (int32).
    mirror_dtypes = {"full": torch.int64, "gpu_only": torch.int32}
    most_committed_why = "a DFlash verify commits at most its block (the accepted drafts and the bonus token)"
    reserves_decode_kv = False  # its row_lens hold DFlash's own reservation (RESERVED_LEN)

    def most_committed(self, num_steps: int, window: int | None) -> int:
        return window or 1

    def validate(self, case: CaseSpec) -> str | None:
        problem = fixed_window_problem(case, "the DFlash block, speculative_num_draft_tokens",
                                       "DFlash drafts and verifies a fixed block per request")
        if problem:
            return problem
        if case.topk != 1:
            return "topk: DFlash verifies a chain (_handle_dflash forces speculative_eagle_topk 1); leave topk at 1"
        if case.host_mirrors == "none":
            return ("host_mirrors: the DFlash worker always hands the backend host lengths (committed + block, "
                    "or the reservation on the GPU-only path); 'none' is no state it produces")
        return None

    def speculative_args(self, spec: CaseSpec) -> dict:
        """As _handle_dflash resolves them: one step, topk 1, the block as the draft-token count."""
        return dict(speculative_algorithm="DFLASH", speculative_eagle_topk=1, speculative_num_steps=1,
                    speculative_num_draft_tokens=self.num_draft_tokens(spec))

    def row_lens(self, spec: CaseSpec) -> list[int]:
        return reserved_lens(spec, self.num_draft_tokens(spec))

    def query_tokens(self, spec: CaseSpec) -> list[int]:
        return [self.num_draft_tokens(spec)] * spec.bs

    def visible_block(self, token: int, block: int) -> range:
        """Block positions token j sees: 0..j (a chain)."""
        return range(token + 1)

    def steps(self, spec: CaseSpec) -> list[ForwardStep]:
        block = self.num_draft_tokens(spec)
        queries, writes, labels = [], [], []
        for request, prefix in enumerate(spec.prefix_lens):
            for token in range(block):
                seen = self.visible_block(token, block)
                queries.append(Query(request, visible_spans(spec, prefix + token, (
                    range(prefix), range(prefix + seen.start, prefix + seen.stop)))))
                writes.append((request, prefix + token))
                labels.append(f"request {request} block token {token}")
        return [ForwardStep(queries, writes, labels)]

    def host_lens(self, spec: CaseSpec) -> list[int]:
        """seq_lens_cpu as the worker sets it: committed + block, or the reservation (GPU-only path)."""
        block = self.num_draft_tokens(spec)
        if spec.host_mirrors == "full":
            return [p + block for p in spec.prefix_lens]
        return reserved_lens(spec, block)

    def forward_batch(self, state, steps: list[ForwardStep]):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        spec = state.spec
        writes = steps[0].writes
        fields = base_fields(
            state, ForwardMode.TARGET_VERIFY, seq_lens=list(spec.prefix_lens),
            out_slots=state.layout.slots_at(writes), num_tokens=len(writes),
            positions=[position for _, position in writes], spec_info=None, algorithm=self.spec_algorithm)
        host = self.host_lens(spec)
        fields.update(seq_lens_cpu=torch.tensor(host, dtype=self.mirror_dtypes[spec.host_mirrors]),
                      seq_lens_sum=sum(host))
        fields["spec_info"] = self.block_input(self.num_draft_tokens(spec), state.device, fields["positions"])
        return ForwardBatch(**fields)

    def block_input(self, block: int, device, positions: torch.Tensor | None):
        """The verify input (DFlashWorkerV2.forward_batch_generation): no mask, topk 1."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.dflash_info import DFlashVerifyInput

        draft_token = None if positions is None else torch.zeros_like(positions)
        return DFlashVerifyInput(draft_token=draft_token, positions=positions, draft_token_num=block,
                                 custom_mask=None, capture_hidden_mode=CaptureHiddenMode[self.capture_hidden])

    def step_views(self, backend, forward_batch):
        return [(backend, forward_batch)]

    def capture_spec_info(self, spec_info, static, tokens_per_request: int):
        """As the decode graph runner's DFLASH capture input: no tokens, no positions, no mask
        (every backend here expresses the block with its built-in mask: dflash_utils
        resolve_dflash_verify_mask_policy)."""
        return self.block_input(tokens_per_request, static.seq_lens.device, None)

    def replay_spec_info(self, spec_info, static, tokens_per_request: int):
        """Replay hands the backend the raw (unpadded) block input."""
        return spec_info


MODE = DFlashVerify()
