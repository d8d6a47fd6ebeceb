"""What a forward mode is, as data the generic runners consume.

A mode says how many token slots each request's row needs, which forwards a
case makes (each with its query tokens, the K/V each writes, and what each may
see), and how sglang's scheduler fills the ForwardBatch for it. Runners (eager,
CUDA graph) and the reference never branch on the mode's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from harness.checks.reference import Query, spans_of

if TYPE_CHECKING:
    import torch

    from harness.base.case_spec import CaseSpec

# A backend entry's builder (harness/fixtures/backends.py BackendEntry.build): (role, model_runner, spec) -> sglang's
# backend. Modes sit below the backend registry, so they are handed the builder, not the entry.
BuildBackend = Callable[[str, Any, "CaseSpec"], Any]


@dataclass(frozen=True)
class ForwardStep:
    """One backend forward: query rows, the row position each writes, what each sees."""

    queries: list[Query]
    writes: list[tuple[int, int]]  # (request, row position) per query row
    labels: list[str]


class SpecMode(Protocol):
    name: str
    backend_role: str  # "target", "draft" or "draft_multi_step": which backend object runs it
    spec_algorithm: str  # sglang's --speculative-algorithm for the worker that runs this forward
    forward_mode: str  # sglang's ForwardMode the backend sees (backend limits key on it)
    attn_type: str  # sglang's AttentionType of the layer (ENCODER_ONLY: non-causal, e.g. DFlash's draft)
    takes_draft_window: bool  # draft_window / draft_sink apply (the multi-step draft decode)
    compact_draft_cache: bool  # draft_window sizes the worker's compact draft KV rows (DFlash's draft)
    windowed: bool  # a case gives input_lens (the window each request brings)
    min_prefix_len: int  # the shortest committed prefix production runs this mode on
    reserves_decode_kv: bool  # its worker's decode step reserves KV past the committed length (scheduler_rules)
    most_committed_why: str  # why one step commits at most most_committed tokens (for error lines)

    def most_committed(self, num_steps: int, window: int | None) -> int: ...  # see scheduler_rules.max_committed_prefix
    def validate(self, spec: CaseSpec) -> str | None: ...  # "field: what is wrong", or None
    def speculative_args(self, spec: CaseSpec) -> dict: ...  # --speculative-* server args
    def worker_skip_reason(self, server_arg: str, graph: bool, spec: CaseSpec) -> str | None: ...
    def build_backend(self, build: BuildBackend, model_runner, spec: CaseSpec): ...
    def row_lens(self, spec: CaseSpec) -> list[int]: ...
    def query_tokens(self, spec: CaseSpec) -> list[int]: ...  # query rows per request, all forwards
    def num_draft_tokens(self, spec: CaseSpec) -> int: ...
    def steps(self, spec: CaseSpec) -> list[ForwardStep]: ...
    def forward_batch(self, state, steps: list[ForwardStep]): ...
    def step_views(self, backend, forward_batch) -> list[tuple[object, object]]: ...
    # CUDA-graph forms (harness/runners/cuda_graph.py)
    def tokens_per_request(self, spec: CaseSpec) -> int: ...
    def rows_per_request(self, spec: CaseSpec) -> int: ...
    def capture_spec_info(self, spec_info, static, tokens_per_request: int): ...
    def replay_spec_info(self, spec_info, static, tokens_per_request: int): ...


EAGLE_MOST_COMMITTED_WHY = ("an EAGLE verify commits the root and the accepted drafts of one path, "
                            "min(num_steps + 1, draft tokens)")


def eagle_most_committed(num_steps: int, window: int | None) -> int:
    """The most tokens one EAGLE step commits (eagle_sample's accept_lens: correct drafts + 1): a
    path through the tree is at most num_steps drafts deep, and no longer than the window."""
    return min(num_steps + 1, window or num_steps + 1)


class ModeDefaults:
    """The hooks most modes answer alike; a mode overrides what its worker does differently."""

    attn_type = "DECODER"
    takes_draft_window = False
    compact_draft_cache = False
    windowed = False
    min_prefix_len = 0  # only draft decode (and frozen-KV MTP drafts) shown never to run on an empty prefix
    # eagle_prepare_for_decode's double buffer (EAGLE, NGRAM, frozen-KV MTP); DFlash's modes put their
    # own reservation in their row_lens instead
    reserves_decode_kv = True
    most_committed_why = EAGLE_MOST_COMMITTED_WHY

    def worker_skip_reason(self, server_arg: str, graph: bool, spec: CaseSpec) -> str | None:
        """Why the algorithm's worker never runs the backend sglang names ``server_arg`` (its
        --attention-backend) in a runner form with (``graph``) or without CUDA-graph hooks, or None."""
        return None

    def build_backend(self, build: BuildBackend, model_runner, spec: CaseSpec):
        """The backend object as the worker builds it: by default the entry's class for the role."""
        return build(self.backend_role, model_runner, spec)

    def query_tokens(self, spec: CaseSpec) -> list[int]:
        """Query rows each request brings over all forwards (what a cell computes, for cost caps)."""
        return [row - prefix for row, prefix in zip(self.row_lens(spec), spec.prefix_lens)]

    def rows_per_request(self, spec: CaseSpec) -> int:
        """Rows of the backend's batch per request: 1, or topk where the worker repeats each request."""
        return 1

    def most_committed(self, num_steps: int, window: int | None) -> int:
        """The most tokens one step of the algorithm commits to a request (EAGLE's rule by default)."""
        return eagle_most_committed(num_steps, window)


def visible_spans(spec: CaseSpec, position: int, prefix: tuple[range, ...] = (),
                  own: tuple[tuple[int, int], ...] = ()) -> tuple[tuple[int, int], ...]:
    """The row positions a query at model ``position`` sees, inside the model's sliding window.

    ``prefix``: committed row ranges (a committed token's row position is its model position);
    ``own``: the query's draft tokens as (row position, model position), e.g. a tree node's row
    prefix + node at model position prefix + depth. With ``sliding_window`` W the query keeps only
    keys at model positions k with position - k < W (HF's rule); every mode's visibility goes
    through here, so the window is applied on positions as the model defines them, never on rows.
    """
    window = spec.sliding_window
    oldest = position - window + 1 if window else 0
    return spans_of(*(range(max(part.start, oldest), part.stop) for part in prefix),
                    *(row for row, at in own if at >= oldest))


def fixed_window_problem(case: CaseSpec, required: str, rule: str) -> str | None:
    """The window check every windowed mode shares: given, and the same for every request."""
    if case.input_lens is None:
        return f"input_lens: required ({required})"
    if len(set(case.input_lens)) != 1:
        return f"input_lens: {rule}; got {case.input_lens}"
    return None


def eagle_speculative_args(spec: CaseSpec, num_draft_tokens: int, algorithm: str = "EAGLE") -> dict:
    """EAGLE's --speculative-* arguments (or an EAGLE-family algorithm's): topk and steps as the user sets them."""
    return dict(speculative_algorithm=algorithm, speculative_eagle_topk=spec.topk,
                speculative_num_steps=spec.num_steps, speculative_num_draft_tokens=num_draft_tokens)


class WindowedMode(ModeDefaults):
    """A mode whose requests each carry the same window of new tokens (verify, draft extend).

    The window is the case's (CaseSpec.window): it is the draft-token count, the tokens per request a
    graph captures, and what each request's row grows by.
    """

    spec_algorithm = "EAGLE"
    windowed = True

    def speculative_args(self, spec: CaseSpec) -> dict:
        return eagle_speculative_args(spec, self.num_draft_tokens(spec), self.spec_algorithm)

    def num_draft_tokens(self, spec: CaseSpec) -> int:
        return spec.window

    def row_lens(self, spec: CaseSpec) -> list[int]:
        return [p + self.num_draft_tokens(spec) for p in spec.prefix_lens]

    def tokens_per_request(self, spec: CaseSpec) -> int:
        return self.num_draft_tokens(spec)


def host_mirror(state, values: list[int], *, kept_on_gpu_only: bool = False):
    """A CPU mirror as the scheduler passes it, or None where the case drops it.

    ``kept_on_gpu_only`` marks mirrors production still supplies on the
    GPU-only path (e.g. DRAFT_EXTEND_V2's extend_seq_lens_cpu).
    """
    mirrors = state.spec.host_mirrors
    if mirrors == "full" or (mirrors == "gpu_only" and kept_on_gpu_only):
        return values
    return None


def base_fields(state, forward_mode, *, seq_lens: list[int], out_slots: torch.Tensor,
                num_tokens: int, positions: list[int], spec_info, algorithm: str) -> dict:
    """ForwardBatch fields every mode sets the same way.

    spec_algorithm is set as ForwardBatch.init_new sets it from the schedule batch:
    FA3/FA4 read it in the verify path (0.5.23: forward_batch.spec_algorithm.is_uno()).
    """
    import torch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    mirrored = host_mirror(state, seq_lens)
    return dict(
        forward_mode=forward_mode,
        batch_size=state.spec.bs,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=state.device),
        req_pool_indices=state.tensor(state.layout.req_pool_indices),
        seq_lens=state.tensor(seq_lens),
        out_cache_loc=out_slots.to(state.device),
        seq_lens_sum=sum(mirrored) if mirrored is not None else None,
        seq_lens_cpu=torch.tensor(mirrored, dtype=torch.int64) if mirrored is not None else None,
        positions=state.tensor(positions),
        spec_info=spec_info,
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm),
    )

