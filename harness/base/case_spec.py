"""One case as a value: the sizes and choices of a batch, and what follows from them.

As vLLM's BatchSpec (tests/v1/attention/utils.py), a case is a small immutable value from which
everything else is derived once, here: the batch size is the number of prefixes, the window is
the one every request brings, the capture sizes and the model's context length follow from the
sizes. Nothing is stored twice.

This module is the bottom of the harness: it imports nothing of it, so the registries (modes,
backends, runner forms), the limits and everything above can name a case without a circle. The
names a case picks from a registry (backends, runner forms, the mode) are plain text here; the
loader (harness/case/cases.py) checks them against the registries, with the harness's limits, when it
reads a file, and says what is wrong. The vocabularies below are the fixtures' own (pools, layouts,
padding), not a registry's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Dtype = Literal["float32", "float16", "bfloat16"]
KvLayout = Literal["shuffled", "contiguous", "interleaved", "non_monotonic"]
HostMirrors = Literal["full", "gpu_only", "none"]
PadStyle = Literal["prod_fill", "small_real"]

# A case that states no context_len runs on a model of at least this context (Llama-2 class):
# production sizes buffers from the model, not from the requests in flight, so short requests
# meet wide buffers as they do there.
DEFAULT_MODEL_CONTEXT_LEN = 4096


def max_request_len(context_len: int) -> int:
    """sglang's max_req_len for a model of this context (tp_worker: context_len - 1, less when the KV
    pool is smaller): a request's prompt plus its output stays below it."""
    return context_len - 1


def default_capture_sizes(bs: int) -> list[int]:
    """The CUDA-graph capture sizes of a case that names none: 1x, 2x and 4x its batch."""
    return [bs, 2 * bs, 4 * bs]


class CaseSpec(BaseModel):
    """One fully expanded case. Field docs are the schema users read (harness/case/cases.py CaseFields
    adds ``bs`` and the registries' names); sizes are harness/case/case_limits.py's."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(description="short id, unique in its file")
    prefix_lens: list[int] = Field(description="committed KV tokens per request (len == bs)")
    input_lens: list[int] | None = Field(
        default=None,
        description="new query tokens per request: the verify window (target_verify) or the "
        "draft-extend window (draft_extend_v2); an int is repeated bs times; unused by draft_decode",
    )
    topk: int = 1
    num_steps: int = Field(default=3, description="EAGLE draft steps")
    page_size: int = 1
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    dtype: Dtype = "float32"
    kv_layout: KvLayout = "shuffled"
    host_mirrors: HostMirrors = Field(
        default="full",
        description="full: CPU mirrors as the scheduler passes them; gpu_only: the GPU-only "
        "path's Nones, exactly as production passes them; none: every *_cpu / seq_lens_sum None",
    )
    runners: list[str] = Field(description="runner forms to run it in (harness/runners)")
    pad_styles: list[PadStyle] = ["prod_fill", "small_real"]
    capture_bs: list[int] = Field(
        default=[],
        description="CUDA-graph capture batch sizes; empty means 1x, 2x and 4x bs",
    )
    backends: list[str] = Field(description="backends to run it on (harness/families/<family>/backends.py; all of the family's by default)")
    context_len: int = Field(
        default=0, description="the model's context length: backends size their buffers from it, and each "
        "req_to_token row gets sglang's speculative headroom on top; a prefix is at most what a request has "
        "committed when a speculative step runs (scheduler_rules.max_committed_prefix: context_len - 5 + the most "
        "tokens one step commits, - 4 + before sglang 0.5.22); 0 = 4096, doubled until the longest prefix is at most context_len - 4 "
        "(never just fits the case)")
    draft_window: int = Field(
        default=0,
        description="draft decode only: --speculative-draft-window-size (0 = off); the draft attends "
        "draft_sink prefix tokens + the most recent draft_window, then its own branch")
    draft_sink: int = Field(default=0, description="draft decode only: --speculative-draft-sink-size")
    sliding_window: int = Field(
        default=0,
        description="the model's sliding window, as its HF config names it (0 = full attention): a query "
        "at position p attends keys at positions k with p - k < sliding_window; sglang's layer gets "
        "sliding_window - 1, as Gemma 2's get_attention_sliding_window_size gives it")
    seed: int = 0
    family: str = Field(default="dense", description="the attention family (harness/families): set by the case "
                        "file's top-level 'family', never per case")
    model: str = Field(default="", description="MLA only: the served model whose latent dims and softmax scale "
                       "the layer has (harness/families/mla/models.py); num_heads is its heads on one GPU")
    deterministic: bool = Field(
        default=False, description="sglang's --enable-deterministic-inference: the backend runs its batch-invariant "
        "kernels, so a request's output must not change by a bit with the batch around it (batch_invariance, and "
        "a graph's replay against eager)")
    batch_invariance: bool = Field(
        default=False, description="also run sampled requests alone, and the first half of the batch, on the same "
        "backend: each request's output must match its output in the whole batch, bitwise under deterministic, "
        "else within the dtype's tolerance (harness/cell/batch_invariance.py)")
    kernel_path: str = Field(
        default="", description="a path forced by a switch sglang exposes (harness/fixtures/kernel_paths.py: "
        "Triton's split count, Lean decode, FlashInfer's tensor cores, FA3's num_splits); its cells run only on the "
        "backends it belongs to. Empty: the path the sizes pick")
    first_request: int = Field(
        default=0, exclude=True, description="not a file's field: the number in its case of a batch's first request, "
        "for a batch cut from a case (batch_invariance); per-request draws (EAGLE and NGRAM trees) follow it, so "
        "a request cut out keeps its tree")

    @model_validator(mode="after")
    def _one_window_per_request(self) -> "CaseSpec":
        if self.input_lens is not None and len(self.input_lens) != len(self.prefix_lens):
            raise ValueError(f"input_lens has {len(self.input_lens)} entries for {len(self.prefix_lens)} "
                             "requests (one per prefix)")
        return self

    @property
    def bs(self) -> int:
        """Real requests in the batch: one per prefix."""
        return len(self.prefix_lens)

    @property
    def window(self) -> int | None:
        """The new tokens each request brings (the modes that take input_lens take one for all), or None."""
        return self.input_lens[0] if self.input_lens else None

    @property
    def capture_sizes(self) -> list[int]:
        return self.capture_bs or default_capture_sizes(self.bs)

    @property
    def draft_shape(self) -> str:
        """'tree' where a request drafts several branches (topk > 1), else 'chain'."""
        return "tree" if self.topk > 1 else "chain"

    @property
    def model_context_len(self) -> int:
        """The model's context length: the case's, or the default doubled until the longest prefix is
        committed in every speculative configuration (context_len - 4, the wall without overlap, never
        above the wall of steps of one token; harness/modes/scheduler_rules.py max_committed_prefix).

        Never derived to just fit the case: backends size their buffers from it as they do in production.
        """
        context_len = self.context_len or DEFAULT_MODEL_CONTEXT_LEN
        while not self.context_len and max_request_len(context_len) - 3 < max(self.prefix_lens):
            context_len *= 2
        return context_len


@dataclass(frozen=True)
class Case:
    """A case bound to its mode and source file (so errors and reports can name them)."""

    mode: str
    spec: CaseSpec
    source: str

    @property
    def case_id(self) -> str:
        return f"{self.mode}-{self.spec.name}"
