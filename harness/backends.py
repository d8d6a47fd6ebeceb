"""Backend entries: how to build each sglang backend for each role, and its limits.

One entry per backend, OpInfo-style: the code that runs cases is generic; what
differs between backends is data here (the sglang classes to build, the
hardware they need, the combinations they reject and why). A limit is stated
with the backend's own reason so a skipped cell says why it did not run.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from harness import platform, releases
from harness.modes import MODES

if TYPE_CHECKING:
    from harness.case_spec import CaseSpec


def _build(module: str, target: str, draft_multi_step: str, **ctor_kwargs):
    """Builder from class names: target/draft roles share the single-step class."""

    def build(role: str, model_runner, spec: "CaseSpec"):
        mod = importlib.import_module(module)
        if role == "draft_multi_step":
            return getattr(mod, draft_multi_step)(model_runner, spec.topk, spec.num_steps, **ctor_kwargs)
        return getattr(mod, target)(model_runner, **ctor_kwargs)

    return build


@dataclass(frozen=True)
class Limit:
    """A combination the backend does not take: predicate on (mode, spec) -> skip reason."""

    applies: Callable[[str, "CaseSpec"], bool]
    reason: str


@dataclass(frozen=True)
class PartialMerge:
    """Where a backend attends in parts, stores each part's output in the output dtype and merges
    them by log-sum-exp, so each part's rounding reaches the output (harness/compare.py HALF_ULP).

    ``split`` says how it parts a query's keys: "prefix|new" (the committed prefix apart from this
    forward's keys, as sglang's cascade and ragged+paged paths do), "page|rest" (cut at the prefix's
    last page boundary instead, as FA3's paged tree draft decode reads the prefix tail with its
    branch) or "any" (parts the harness cannot see, e.g. split-KV inside one kernel call, bounded
    for every split)."""

    applies: Callable[[str, "CaseSpec", bool], bool]  # (mode, spec, graph form)
    split: str
    site: str  # the sglang code that merges, for the reader


@dataclass(frozen=True)
class BackendEntry:
    """Everything the harness knows about one backend; nothing about it lives elsewhere."""

    name: str
    server_arg: str  # sglang --attention-backend value
    build: Callable
    needs_gpu: bool
    import_check: str  # module whose import proves the backend's kernels are installed
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    dtype_reason: str = ""  # why the others are refused, in the backend's own words
    triton_kernels: bool = False  # runs Triton kernels, so on CPU under Triton's interpreter
    limits: tuple[Limit, ...] = field(default=())
    partial_merges: tuple[PartialMerge, ...] = field(default=())  # measured: docs/detectors.md
    min_capability: tuple[int, int] | None = None
    no_graph_reason: str | None = None  # set when it has no CUDA-graph hooks, saying why
    cg_meta_exact: bool = False  # its forwards read only graph buffers, so cg_meta is exact
    draft_window_since: str | None = None  # first release whose draft backend honours draft_window
    # Buffers init_cuda_graph_state allocates, per release, as harness/graph_buffers.py names
    # them (step backends and list positions folded); every one is guarded, and one not listed
    # fails the cell.
    graph_buffers: releases.since[frozenset[str]] = releases.since({"0.5.17": frozenset()})

    def skip_reason(self, mode: str, spec: "CaseSpec") -> str | None:
        for rule in PLATFORM_RULES:
            reason = rule(self, spec)
            if reason:
                return reason
        if importlib.util.find_spec(self.import_check.split(".")[0]) is None:
            return f"{self.name}: package providing '{self.import_check}' is not installed"
        return self.refusal(mode, spec)

    def refusal(self, mode: str, spec: "CaseSpec") -> str | None:
        """Why the backend takes no such case on any machine (its dtypes, the draft window, its
        limits), or None: skip_reason without what only this machine lacks."""
        if spec.dtype not in self.dtypes:
            return f"{self.name}: {self.dtype_reason}"
        reason = self._draft_window_reason(spec)
        if reason:
            return reason
        for limit in self.limits:
            if limit.applies(mode, spec):
                return f"{self.name}: {limit.reason}"
        return None


    def partial_split(self, mode: str, spec: "CaseSpec", graph: bool) -> str | None:
        """How this backend parts a query's keys into merged partial outputs here, or None."""
        return next((merge.split for merge in self.partial_merges if merge.applies(mode, spec, graph)), None)

    def _draft_window_reason(self, spec: "CaseSpec") -> str | None:
        if not spec.draft_window:
            return None
        if self.draft_window_since is None:
            return (f"{self.name}: its draft backend ignores --speculative-draft-window-size (sglang honours "
                    "it on the Triton and FlashInfer draft backends only, arg_groups/speculative_hook.py)")
        release = releases.installed().contracts
        if releases.version_key(release) < releases.version_key(self.draft_window_since):
            return (f"{self.name}: the draft window / sink reaches its draft backend from sglang "
                    f"{self.draft_window_since} on (contracts of {release} apply here)")
        return None


def _needs_missing_gpu(entry: BackendEntry, spec: "CaseSpec") -> str | None:
    if entry.needs_gpu and not platform.HAS_GPU:
        return f"{entry.name} needs a CUDA GPU (this machine has none)"
    return None


def _bf16_under_interpreter(entry: BackendEntry, spec: "CaseSpec") -> str | None:
    if entry.triton_kernels and not platform.HAS_GPU and spec.dtype == "bfloat16":
        return "bf16 is broken in Triton's CPU interpreter (triton-lang/triton#11584); runs on GPU"
    return None


def _below_min_capability(entry: BackendEntry, spec: "CaseSpec") -> str | None:
    if entry.min_capability and platform.HAS_GPU and platform.compute_capability() < entry.min_capability:
        return f"{entry.name} needs compute capability >= {entry.min_capability}"
    return None


# What this machine cannot run, stated once for every backend, each with a reason true for it.
PLATFORM_RULES = (_needs_missing_gpu, _bf16_under_interpreter, _below_min_capability)


def _mode_is(field: str, *values: str) -> Callable[[str, "CaseSpec"], bool]:
    """A limit keyed on what a mode is (its forward mode, backend role), not on its name,
    so a new mode meets the limits of the forward it makes without an edit here."""

    def applies(mode: str, spec: "CaseSpec") -> bool:
        return getattr(MODES[mode], field) in values

    return applies


_HALF_PRECISION = ("float16", "bfloat16")


def _backend_topk(mode: str, spec: "CaseSpec") -> int:
    """The topk the backend is built with (NGRAM's is its BFS breadth, not the case's topk)."""
    return MODES[mode].speculative_args(spec).get("speculative_eagle_topk") or 1


def _merges_when(forward_mode: str, *, graph: bool | None = None, tree: bool = False):
    """A PartialMerge predicate: the mode's forward, optionally one runner kind, optionally topk > 1."""

    def applies(mode: str, spec: "CaseSpec", is_graph: bool) -> bool:
        return (MODES[mode].forward_mode == forward_mode and (graph is None or graph == is_graph)
                and (not tree or _backend_topk(mode, spec) > 1))

    return applies


def _paged_tree(algorithm: str) -> Callable[[str, "CaseSpec"], bool]:
    """The mode runs under ``algorithm`` and drafts a tree (sglang's topk > 1) over pages."""

    def applies(mode: str, spec: "CaseSpec") -> bool:
        args = MODES[mode].speculative_args(spec)
        return (spec.page_size > 1 and args.get("speculative_algorithm") == algorithm
                and (args.get("speculative_eagle_topk") or 1) > 1)

    return applies


_FA_MERGES = (
    PartialMerge(_merges_when("TARGET_VERIFY", tree=True), "prefix|new",
                 "flashattention_backend.py forward_extend: use_cascade_attn (topk > 1), prefix and expand "
                 "outputs merged by merge_state_v2_wrapper"),
    PartialMerge(_merges_when("DECODE", tree=True), "page|rest",
                 "flashattention_backend.py forward_decode (topk > 1): the prefix up to its last page boundary "
                 "(init_forward_metadata: cache_seqlens -= last_page_lens) and the branch's pages, the prefix "
                 "tail copy included (draft_decode_set_expand_metadata), merged by merge_state_v2"),
)
_FLASHINFER_MERGES = (
    PartialMerge(_merges_when("DRAFT_EXTEND_V2", graph=False), "prefix|new",
                 "flashinfer_backend.py forward_extend: ragged (new tokens) and paged (prefix) outputs merged "
                 "by _safe_merge_state"),
    PartialMerge(_merges_when("DRAFT_EXTEND_V2", graph=True), "any",
                 "flashinfer_backend.py forward_extend under a graph: one paged prefill whose split-KV "
                 "partials are merged inside FlashInfer"),
)


def _installed_before(release: str) -> bool:
    return releases.version_key(releases.installed().contracts) < releases.version_key(release)


def _window_in_draft_decode_before(release: str) -> Callable[[str, "CaseSpec"], bool]:
    return lambda mode, spec: bool(spec.sliding_window) and mode == "draft_decode" and _installed_before(release)


def _window_in_paged_tree_verify(mode: str, spec: "CaseSpec") -> bool:
    """A model window in a verify whose speculative topk is > 1 (every NGRAM verify: its topk is the
    BFS breadth), on pages > 1 token; the topk is the mode's own server argument."""
    tree = MODES[mode].backend_role == "target" and MODES[mode].speculative_args(spec)["speculative_eagle_topk"] > 1
    return bool(spec.sliding_window) and tree and spec.page_size > 1


# What sglang's argument hooks refuse at server start, in 0.5.17 and 0.5.23 alike (arg_groups/speculative_hook.py).
_EAGLE_PAGED_TREE = Limit(_paged_tree("EAGLE"), "sglang serves speculative_eagle_topk > 1 with page_size > 1 "
                          "on flashinfer, fa3 and triton only (_handle_eagle_family, _PAGE_TREE_SPEC_BACKENDS)")
_NGRAM_PAGED = Limit(_paged_tree("NGRAM"), "sglang refuses NGRAM (topk = the BFS breadth > 1) with page_size > 1 "
                     "except on flashinfer: 'unstable and produces incorrect results for paged attention "
                     "backends' (_handle_ngram)")


_TRITON_GRAPH_BUFFERS = frozenset({
    "cuda_graph_kv_indices",  # multi-step: one 2-D buffer, a row per step backend
    "cuda_graph_num_kv_splits",  # multi-step: one buffer shared by all step backends
    "cuda_graph_attn_logits", "cuda_graph_attn_lse",
    "_verify_mask.buffer",  # target role only
})
_TRITON_WINDOW = frozenset({  # with a model window (sliding_window): the window layers' read rail
    "cuda_graph_window_kv_indices",  # multi-step 0.5.23+: also the owner's 2-D buffer, a row per step
    "cuda_graph_window_num_kv_splits", "cuda_graph_window_kv_offsets",
})
_TRITON_LEAN_DECODE = frozenset({  # persistent-grid decode partials (0.5.19+)
    "cuda_graph_lean_Mp", "cuda_graph_lean_Lp", "cuda_graph_lean_Op", "cuda_graph_lean_locks"})


def _keys(attribute: str, *keys: str) -> set[str]:
    """Graph buffers kept in a dict attribute (FA3/FA4 metadata dicts)."""
    return {f"{attribute}[{key!r}]" for key in keys}


_FA_TABLES = ("cache_seqlens", "cu_seqlens_q", "cu_seqlens_k", "page_table")
_FA_GRAPH_BUFFERS = frozenset({
    *_keys("decode_cuda_graph_metadata", *_FA_TABLES, "strided_indices", "page_table_draft_decode"),
    *_keys("target_verify_metadata", *_FA_TABLES, "strided_indices"),
    *_keys("draft_extend_metadata", *_FA_TABLES, "strided_indices"),
    *_keys("draft_decode_metadata_topk_normal", *_FA_TABLES),  # topk > 1 only
    *_keys("draft_decode_metadata_topk_expand", *_FA_TABLES),
    *_keys("target_verify_metadata_topk_normal", *_FA_TABLES),
    *_keys("target_verify_metadata_topk_expand", *_FA_TABLES),
    *_keys("target_verify_metadata_topk_swa", *_FA_TABLES),  # topk > 1 with a model window
    "_verify_mask.buffer",  # target role only
})


def _flash_attention(version: int, import_check: str, min_capability: tuple[int, int],
                     dtype_reason: str, graph_buffers: frozenset[str], limits: tuple[Limit, ...]) -> BackendEntry:
    """FA3 and FA4 are one sglang class, FlashAttentionBackend, told apart by fa_impl_ver."""
    return BackendEntry(
        name=f"fa{version}", server_arg=f"fa{version}", needs_gpu=True, import_check=import_check,
        build=_build("sglang.srt.layers.attention.flashattention_backend", "FlashAttentionBackend",
                     "FlashAttentionMultiStepBackend", fa_impl_ver=version),
        min_capability=min_capability, dtypes=_HALF_PRECISION, dtype_reason=dtype_reason,
        graph_buffers=releases.since({"0.5.17": graph_buffers}), partial_merges=_FA_MERGES,
        limits=(
            Limit(_window_in_paged_tree_verify,
                  "FlashAttention backend doesn't support topk > 1 speculative decoding with page size > 1 "
                  "sliding window attention (flashattention_backend.py _init_sliding_window_attn_spec_metadata, "
                  "0.5.17-0.5.23)"),
            *limits,
        ),
    )


BACKENDS: dict[str, BackendEntry] = {
    entry.name: entry
    for entry in (
        BackendEntry(
            name="triton", server_arg="triton", needs_gpu=False, import_check="triton",
            build=_build("sglang.srt.layers.attention.triton_backend",
                         "TritonAttnBackend", "TritonMultiStepDraftBackend"),
            triton_kernels=True, cg_meta_exact=True, draft_window_since="0.5.21",
            graph_buffers=releases.since({
                "0.5.17": _TRITON_GRAPH_BUFFERS | _TRITON_WINDOW,
                "0.5.19": _TRITON_GRAPH_BUFFERS | _TRITON_WINDOW | _TRITON_LEAN_DECODE,
                "0.5.23": _TRITON_GRAPH_BUFFERS | _TRITON_WINDOW | _TRITON_LEAN_DECODE | {"cuda_graph_uneven_batch"},
            }),
            limits=(
                Limit(_window_in_draft_decode_before("0.5.23"),
                      "a sliding-window layer reads forward_metadata.window_kv_indices, which "
                      "TritonMultiStepDraftBackend leaves None before sglang 0.5.23 (its per-step window rail, "
                      "window_rail / generate_draft_decode_window_kv_indices, arrives in 0.5.23)"),
                _NGRAM_PAGED,
            ),
        ),
        BackendEntry(
            name="flashinfer", server_arg="flashinfer", needs_gpu=True, import_check="flashinfer",
            build=_build("sglang.srt.layers.attention.flashinfer_backend",
                         "FlashInferAttnBackend", "FlashInferMultiStepDraftBackend"),
            dtypes=_HALF_PRECISION, draft_window_since="0.5.21", partial_merges=_FLASHINFER_MERGES,
            dtype_reason="FlashInfer kernels take fp16/bf16 (fp32 raises KeyError: torch.float32)",
            graph_buffers=releases.since({"0.5.17": frozenset({
                "cuda_graph_kv_indices",  # multi-step owner: one 2-D buffer, a row per step backend
                "cuda_graph_kv_indices[*]",  # one per wrapper; a step backend's first is its row
                "cuda_graph_custom_mask", "cuda_graph_qk_indptr[*]", "cuda_graph_qo_indptr[*]",
                # the verify / draft-extend graphs' own workspace, allocated only under
                # --apply-fix flashinfer-graph-workspace (harness/seed_bugs.py)
                "cuda_graph_prefill_workspace_buffer",
            })}),
        ),
        _flash_attention(3, "sgl_kernel.flash_attn", (8, 0),
                         "FA3 kernels take fp16/bf16 only (sgl_kernel flash_attn dtype check)",
                         _FA_GRAPH_BUFFERS | {"_sched_meta_buf"},  # FA3's scheduler metadata
                         limits=(_NGRAM_PAGED,)),
        _flash_attention(4, "cutlass", (9, 0),
                         "FA4 CuTe: inputs must be float16, bfloat16, fp8 e4m3fn, or fp8 e5m2",
                         _FA_GRAPH_BUFFERS, limits=(_EAGLE_PAGED_TREE, _NGRAM_PAGED)),
        BackendEntry(
            name="torch_native", server_arg="torch_native", needs_gpu=False, import_check="torch",
            build=_build("sglang.srt.layers.attention.torch_native_backend",
                         "TorchNativeAttnBackend", "TorchNativeAttnBackend"),
            no_graph_reason="init_cuda_graph_state raises NotImplementedError",
            limits=(
                Limit(_mode_is("backend_role", "draft_multi_step"),
                      "EAGLE is not supported in decode attention backend torch_native "
                      "(sglang DraftBackendFactory; no multi-step class)"),
                Limit(_mode_is("forward_mode", "TARGET_VERIFY"),
                      "TARGET_VERIFY is not supported: forward_extend ignores spec_info.custom_mask "
                      "and reads extend_prefix_lens, which verify batches do not carry"),
                _EAGLE_PAGED_TREE,
            ),
        ),
    )
}
