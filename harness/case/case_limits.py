"""How large a case may be: each limit stated once, as data, with the reason it exists.

A size that no backend or machine can serve must stop when the file is loaded, naming the limit
and why, not hours later as an out-of-memory kill or a kernel error in every cell. The ranges
per field come from what sglang 0.5.17 and its kernels take; the memory estimate adds up the
largest buffers one cell allocates, so sizes that are each fine but too large together are
caught too; the case count caps what a sweep may expand to, and a user can raise it on purpose.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from harness.base.case_spec import CaseSpec, default_capture_sizes
from harness.runners import GRAPH_RUNNER_NAMES
from harness.modes.scheduler_rules import IN_FLIGHT_BELOW_MAX_REQ_LEN, max_committed_prefix

if TYPE_CHECKING:
    from harness.families.base import LayerShape
    from harness.modes.base import SpecMode


@dataclass(frozen=True)
class Range:
    """Whole numbers low..high (in steps of ``multiple_of``); ``why`` explains the upper bound."""

    low: int
    high: int
    why: str
    multiple_of: int = 1

    def problem(self, value: int) -> str | None:
        if value < self.low:
            return f"{value} is below {self.low} (valid: {self.low}..{self.high:,})"
        if value > self.high:
            return f"{value:,} is over {self.high:,} ({self.why})"
        if value % self.multiple_of:
            return f"{value} is not a multiple of {self.multiple_of} ({self.why})"
        return None


MAX_ROW_TOKENS = 262_144
MAX_STEP_TOKENS = 256  # the longest window a case's step brings (FIELD_RANGES input_lens)
_LONGEST = ("256K tokens is the longest native context of the models sglang serves (Qwen3-2507's 262,144); "
            "a longer row is usually a typo, and the memory check bounds what a cell may allocate")
_GRAPH_BS = ("sglang 0.5.17 captures decode CUDA graphs for at most 512 requests; "
             "its server_args pick max_bs 8..512 by GPU memory")
_BATCH = ("the scale tier's largest batch: sglang runs a batch above its largest capture size eagerly, up to "
          "max_running_requests, which it sizes from the KV pool (1,024 and more on an H200)")

FIELD_RANGES: dict[str, Range] = {
    "bs": Range(1, 1024, _BATCH),
    "capture_bs": Range(1, 512, _GRAPH_BS),
    "prefix_lens": Range(0, MAX_ROW_TOKENS + MAX_STEP_TOKENS,
                         f"{_LONGEST}; a request of a model of that context commits fewer than {MAX_STEP_TOKENS} "
                         "tokens more, the longest window one step commits (scheduler_rules.max_committed_prefix)"),
    "context_len": Range(0, MAX_ROW_TOKENS + 1024,
                         f"the longest prefix, {MAX_ROW_TOKENS:,} tokens, plus room for its draft tokens"),
    "input_lens": Range(1, 256, "the verify / draft-extend window is speculative_num_draft_tokens "
                                "long; sglang's auto-chosen EAGLE settings use 4 or 8"),
    "topk": Range(1, 8, "sglang's auto-chosen EAGLE settings use topk 1 or 4; "
                        "draft trees grow as topk ** num_steps"),
    "num_steps": Range(1, 16, "sglang's auto-chosen EAGLE settings use 3 or 5 draft steps"),
    "page_size": Range(1, 128, "the largest page any sglang backend takes is 128 tokens: "
                               "cutlass_mla needs 128, TRT-LLM MHA takes 16..128"),
    "num_heads": Range(1, 128, "the largest models sglang serves, Llama-3.1-405B and DeepSeek-V3, "
                               "have 128 query heads"),
    "num_kv_heads": Range(1, 128, "KV heads never outnumber query heads"),
    "head_dim": Range(8, 256, "FA3 takes head dims up to 256 in multiples of 8, as flash-attention's "
                              "forward checks, and MHA models use 64 to 256", multiple_of=8),
    "draft_window": Range(0, MAX_ROW_TOKENS, "a window as long as the longest prefix already sees all of it"),
    "draft_sink": Range(0, MAX_ROW_TOKENS, "a sink as long as the longest prefix already sees all of it"),
    "sliding_window": Range(0, MAX_ROW_TOKENS, "a window as long as the longest row already sees all of it"),
    "seed": Range(0, 2**32 - 1, "draft trees seed torch.Generator with seed x 1000 + request, "
                                "which must stay within 64 bits"),
}


def sliding_window_problem(fields: Mapping[str, Any]) -> str | None:
    """What is wrong with a case's model window (its fields as a file gives them), else None (the
    range is FIELD_RANGES')."""
    if fields["sliding_window"] == 1:
        return ("1 is a window sglang cannot serve: the layer gets sliding_window - 1 = 0, which "
                "RadixAttention reads as no window (sliding_window_size or -1); give 0 (full attention) "
                "or at least 2")
    if fields["sliding_window"] and (fields["draft_window"] or fields["draft_sink"]):
        return ("no rule combines the model's window with the draft window / sink (sglang 0.5.23: Triton's "
                "window layers read their own window rail and ignore the draft window, FlashInfer's read the "
                "draft window's indices), so a case takes sliding_window or draft_window / draft_sink, not both")
    return None


def field_problem(fields: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, what is wrong) for the first value of a case's fields (as a file gives them) outside
    FIELD_RANGES, else None."""
    for field, limit in FIELD_RANGES.items():
        value = fields[field]
        values = value if isinstance(value, list) else [] if value is None else [value]
        for index, item in enumerate(values):
            problem = limit.problem(item)
            if problem:
                return field, (f"item {index + 1}: {problem}" if isinstance(value, list) else problem)
    graph = any(runner in GRAPH_RUNNER_NAMES for runner in fields["runners"])
    sizes = default_capture_sizes(fields["bs"])
    if graph and not fields["capture_bs"] and max(sizes) > FIELD_RANGES["capture_bs"].high:
        return "capture_bs", (f"left out, it is bs, 2 x bs, 4 x bs = {sizes}, over "
                              f"{FIELD_RANGES['capture_bs'].high} ({_GRAPH_BS}); give capture_bs sizes up to it")
    return None


# --- memory one cell takes -------------------------------------------------------------------

CELL_MEMORY_ENV = "ATTN_HARNESS_CELL_MEMORY_GIB"
DEFAULT_CELL_MEMORY_GIB = 4
BUDGET_WHY = ("a cell's buffers live in one pytest-xdist worker, and the 2-core CI machine has "
              "24 GiB for two workers beside sglang and torch; a GPU run with fewer workers per GPU "
              f"may raise it on purpose ({CELL_MEMORY_ENV})")


def raised_on_purpose(env: str, default: int, unit: str) -> int:
    """A limit the user may raise on purpose: ``env`` as a whole number of ``unit``, at least 1, else ``default``."""
    text = os.environ.get(env, str(default))
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"{env}={text!r}: expected a whole number of {unit}, at least 1")
    return int(text)


def cell_memory_budget() -> int:
    """Bytes one cell may allocate: DEFAULT_CELL_MEMORY_GIB, or what the user set on purpose (the scale
    tier's cells are larger than the CI machine's workers hold)."""
    return raised_on_purpose(CELL_MEMORY_ENV, DEFAULT_CELL_MEMORY_GIB, "GiB") << 30


INDEX_BYTES = 8  # sglang's CUDA-graph kv_indices are int64
TRITON_LOGITS = "cuda_graph_attn_logits"  # TritonAttnBackend's decode-kernel logits, eager and in graphs
TRITON_KV_SPLITS = 8  # harness/fixtures/sglang_env.py sets triton_attention_num_kv_splits


@dataclass(frozen=True)
class Buffer:
    """One of the largest allocations of a cell: what it is, its size, the field to shrink."""

    name: str
    size: Callable[["CellSizes"], int]
    shrink: str


@dataclass(frozen=True)
class CellSizes:
    """The numbers the buffers are sized from, for the largest cell of a case."""

    spec: CaseSpec
    row_tokens: int  # all requests' rows together (prefix + the tokens the mode adds), in whole pages
    graph_bs: int  # largest capture size, or 0 when no graph form runs
    rows_per_request: int  # rows of the backend's batch per request (SpecMode.rows_per_request)
    tokens_per_request: int
    context_len: int
    graph_steps: int  # rows of a multi-step draft's shared kv_indices: one per draft step (1 otherwise)
    dtype_bytes: int
    shape: "LayerShape"  # the family's layer: what the pool keeps a token, heads, the value dims
    triton_kv_splits: int  # Triton's max_kv_splits for the case on this machine (the family's rule); 0 where
    # no backend of the case keeps Triton's logits buffers (none lists cuda_graph_attn_logits)
    eager_decode_bs: int  # requests of an eager decode-kernel forward (draft decode), 0 when none runs


def _triton_logits(s: CellSizes, tokens: int) -> int:
    """A Triton decode-kernel logits buffer for ``tokens`` query rows: [tokens, heads, max_kv_splits,
    v_head_dim] fp32 (init_cuda_graph_state's cuda_graph_attn_logits; init_forward_metadata's attn_logits)."""
    return tokens * s.shape.num_heads * s.triton_kv_splits * s.shape.v_head_dim * 4


def _triton_window_indices(s: CellSizes) -> int:
    """init_cuda_graph_state's window read rail: capture size x tokens per request x the window; the
    step backends of a multi-step draft take zeros_like their kv_indices row, beside the owner's rail."""
    if not s.spec.sliding_window:
        return 0
    per_token = 2 * s.graph_steps * s.context_len if s.graph_steps > 1 else s.spec.sliding_window
    return INDEX_BYTES * s.graph_bs * s.tokens_per_request * per_token


BUFFERS = (
    Buffer("the KV pool and the harness's copy of it (row tokens x 1.25 spare x what the family's pool keeps "
           "a token x 2 copies)",
           lambda s: int(s.row_tokens * 1.25) * s.shape.pool_dims * 2 * s.dtype_bytes,
           "prefix_lens"),
    Buffer("req_to_token (pool rows x context_len x int32)",
           lambda s: (3 * max(s.spec.bs, s.graph_bs) + 1) * s.context_len * 4, "context_len"),
    Buffer("the CUDA-graph kv_indices (capture size x rows x tokens per request x context_len x int64, "
           "per draft step)",
           lambda s: s.graph_steps * s.graph_bs * s.rows_per_request * s.tokens_per_request * s.context_len
           * INDEX_BYTES,
           "capture_bs"),
    Buffer("Triton's CUDA-graph window kv_indices, with a sliding_window (capture size x tokens per "
           "request x the window x int64; a multi-step draft's step backends each copy their kv_indices row)",
           _triton_window_indices, "capture_bs"),
    Buffer("Triton's CUDA-graph attention logits (capture size x rows x tokens per request x num_heads x "
           "max_kv_splits x v_head_dim x fp32, per step backend)",
           lambda s: max(s.graph_steps - 1, 1) * _triton_logits(s, s.graph_bs * s.rows_per_request
                                                                * s.tokens_per_request), "capture_bs"),
    Buffer("Triton's eager decode logits (bs x tokens per request x num_heads x max_kv_splits x v_head_dim x "
           "fp32, one per draft step: a multi-step draft builds every step's metadata at once)",
           lambda s: s.graph_steps * _triton_logits(s, s.eager_decode_bs * s.tokens_per_request), "bs"),
)


def largest_cell_sizes(mode: "SpecMode", spec: CaseSpec) -> CellSizes:
    """The sizes of the case's largest cell: its largest capture size, padded with small_real rows."""
    import torch

    from harness.base import platform
    from harness.families import BACKENDS, FAMILIES

    rows = mode.row_lens(spec)
    graph = any(runner in GRAPH_RUNNER_NAMES for runner in spec.runners)
    eager = any(runner not in GRAPH_RUNNER_NAMES for runner in spec.runners)
    page = spec.page_size
    family = FAMILIES[spec.family]
    return CellSizes(
        spec=spec, row_tokens=sum(-(-row // page) * page for row in rows),
        graph_bs=max(spec.capture_sizes) if graph else 0, rows_per_request=mode.rows_per_request(spec),
        tokens_per_request=mode.tokens_per_request(spec),
        context_len=spec.model_context_len,
        graph_steps=spec.num_steps if mode.backend_role == "draft_multi_step" else 1,
        dtype_bytes=torch.finfo(getattr(torch, spec.dtype)).bits // 8,
        shape=family.shape(spec),
        triton_kv_splits=family.triton_kv_splits(spec, TRITON_KV_SPLITS, platform.sm_count()) if any(
            TRITON_LOGITS in BACKENDS[name].graph_buffers.value for name in spec.backends) else 0,
        eager_decode_bs=spec.bs if eager and mode.forward_mode == "DECODE" else 0,
    )


def _most_committed(mode: "SpecMode", spec: CaseSpec) -> int:
    return mode.most_committed(spec.num_steps, spec.window)


def committed_wall(mode: "SpecMode", spec: CaseSpec) -> int:
    """The case's context wall: the longest prefix a step of its mode runs on, for its stated context_len."""
    return max_committed_prefix(spec.context_len, _most_committed(mode, spec))


def _past_the_wall(mode: "SpecMode", spec: CaseSpec) -> str | None:
    """Why a prefix is longer than any request is committed when a step of this mode runs, or None."""
    most, wall = _most_committed(mode, spec), committed_wall(mode, spec)
    index, longest = max(enumerate(spec.prefix_lens, start=1), key=lambda item: item[1])
    if longest <= wall:
        return None
    below = IN_FLIGHT_BELOW_MAX_REQ_LEN.value
    return (f"item {index} is {longest}, a committed length production never reaches with context_len "
            f"{spec.context_len}: a speculative step runs on at most max_req_len - {below} + {most} = {wall} "
            f"committed tokens (max_req_len = context_len - 1; max_new_tokens <= max_req_len - prompt - 1; under "
            f"overlap a request runs one more step from max_req_len - {below} committed, after one that "
            f"committed at most {most} tokens: {mode.most_committed_why}; harness/modes/scheduler_rules.py); give "
            f"prefixes <= {wall}, or a larger context_len")


def _gib(size: int) -> str:
    return f"{size / (1 << 30):,.1f} GiB"


def case_problem(mode: "SpecMode", spec: CaseSpec) -> tuple[str, str] | None:
    """(field, what is wrong) when the case needs what no cell can have, else None.

    Runs after the mode accepted the case, so row lengths are the mode's own.
    """
    if spec.context_len:
        problem = _past_the_wall(mode, spec)
        if problem:
            return "prefix_lens", problem
    sizes = largest_cell_sizes(mode, spec)
    needs = sorted(((buffer.size(sizes), buffer) for buffer in BUFFERS), key=lambda pair: -pair[0])
    total = sum(size for size, _ in needs)
    budget = cell_memory_budget()
    if total <= budget:
        return None
    size, largest = needs[0]
    shrink = "bs" if largest.shrink == "capture_bs" and not spec.capture_bs else largest.shrink
    return shrink, (f"a cell of this case needs about {_gib(total)}, {_gib(size)} of it for "
                    f"{largest.name}; a cell may take {_gib(budget)} ({BUDGET_WHY}); "
                    f"make {shrink} smaller")


# --- how many cases a file may expand to -----------------------------------------------------

MAX_CASES_ENV = "ATTN_HARNESS_MAX_CASES"
DEFAULT_MAX_CASES = 1000
MAX_CASES_WHY = ("a case makes up to about 55 cells, 5 backends x eager and 2 graph forms x "
                 "capture sizes x paddings, so 1,000 cases are some 50,000 cells, hours on a GPU")


def max_cases() -> int:
    """The most cases one file may expand to: DEFAULT_MAX_CASES, or what the user set on purpose."""
    return raised_on_purpose(MAX_CASES_ENV, DEFAULT_MAX_CASES, "cases")


def count_problem(count: int, already: int, factors: list[int]) -> str | None:
    """What to say when an entry expanding to ``count`` cases takes the file over the cap."""
    limit = max_cases()
    if already + count <= limit:
        return None
    product = " x ".join(map(str, factors))
    earlier = f" after {already:,} earlier cases" if already else ""
    return (f"expands to {count:,} cases ({product}){earlier}, over the limit of {limit:,} cases per "
            f"file ({MAX_CASES_WHY}); to run them on purpose, set {MAX_CASES_ENV}={already + count}")


def expansion_factors(sweep: dict, variants: list) -> tuple[int, list[int]]:
    """How many cases a sweep x variants entry makes, and the factors, without expanding it."""
    factors = [len(values) for values in sweep.values()] + ([len(variants)] if len(variants) > 1 else [])
    return math.prod(factors), factors or [1]
