"""The patches attn-harness applies to the installed sglang: one registry, two kinds.

- Seed-bug replays (``--replay ID``): the five sglang bugs attn-harness exists to catch, as
  injectable pre-fix behaviour: a patched copy of the installed function each concerns, made from
  that function's own source with the fix reverted (or, where the bug lived outside any backend,
  the faulty batch state the next forward received).
- Fixes (``--apply-fix ID``): the reverse, the installed function patched toward a proposed fix
  of a bug the harness found, so the cells that show the bug can be run with it fixed.

A patch whose source pattern no longer matches stops with an error naming the function: it is
never silently a no-op. Patches are applied only when a run asks for them, never in a normal run.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import linecache
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


class ReplayError(RuntimeError):
    """A patch (a replay or a fix) could not be applied to the installed sglang."""


@dataclass(frozen=True)
class Swap:
    """Within every match of ``context`` (words, any whitespace between), ``old`` becomes ``new``;
    the context must match exactly ``count`` times, so a patch never changes more places than it
    was written for."""

    context: str
    old: str
    new: str
    count: int = 1


def _words(pattern: str) -> str:
    return r"\s+".join(re.escape(word) for word in pattern.split())


def _indented_like_its_line(source: str, start: int, text: str) -> str:
    """``text`` with every line after its first indented like the line the match starts on."""
    line = source[source.rfind("\n", 0, start) + 1:]
    indent = line[: len(line) - len(line.lstrip(" "))]
    return text.replace("\n", "\n" + indent)


def rewrite(source: str, replacements: list, where: str) -> str:
    """``source`` with ``replacements`` applied, or ReplayError naming ``where`` and the pattern that
    no longer matches. A pattern is words in which a single space stands for any run of whitespace,
    so patterns read like the code and survive re-indentation; a (pattern, text) pair must match at
    least once, and later lines of a multi-line text are indented like the line the match starts on."""
    for replacement in replacements:
        if isinstance(replacement, Swap):
            pattern = _words(replacement.context)
            found = len(re.findall(pattern, source))
            if found != replacement.count:
                raise ReplayError(f"{where}: pattern {replacement.context[:60]!r} found {found} times, the patch "
                                  f"expects {replacement.count}; this sglang version no longer matches the patch")
            source = re.sub(pattern, lambda match: match.group(0).replace(replacement.old, replacement.new), source)
            continue
        old, new = replacement
        source, count = re.subn(_words(old), lambda match: _indented_like_its_line(match.string, match.start(), new),
                                source)
        if not count:
            raise ReplayError(f"{where}: pattern {old[:60]!r} not found; "
                              "this sglang version no longer matches the patch")
    return source


def patch_source(owner, name: str, replacements: list) -> None:
    """Replace ``owner.name`` by a copy of its source with ``replacements`` applied (see rewrite).

    A method is compiled with ``__class__`` bound to its class, so a zero-argument ``super()`` in
    it still works.
    """
    function = getattr(owner, name)
    source = rewrite(textwrap.dedent(inspect.getsource(function)), replacements, f"{owner.__name__}.{name}")
    namespace: dict = {}
    module = sys.modules[function.__module__]
    if inspect.isclass(owner):
        source = f"def _bind(__class__):\n{textwrap.indent(source, '    ')}\n    return {name}\n"
    filename = f"<patched {owner.__name__}.{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show its lines
    exec(compile(source, filename, "exec"), module.__dict__, namespace)
    patched = namespace["_bind"](owner) if inspect.isclass(owner) else namespace[name]
    patched.__dict__.update(function.__dict__)  # state kept on the function (FA4's compile caches)
    setattr(owner, name, patched)


@dataclass(frozen=True)
class SourcePatch:
    """Replacements in one function of an sglang module, for a patch written as data."""

    module: str  # e.g. "sglang.srt.layers.attention.flashattention_backend"
    owner: str  # the class holding the function, or "" for a module-level function
    function: str
    replacements: tuple

    def apply(self) -> None:
        import importlib

        module = importlib.import_module(self.module)
        patch_source(getattr(module, self.owner) if self.owner else module, self.function, list(self.replacements))

    def path_in(self, site_packages: Path) -> Path:
        return site_packages.joinpath(*self.module.split(".")).with_suffix(".py")


def _function_lines(tree: ast.Module, owner: str, function: str) -> tuple[int, int] | None:
    """(first line incl. decorators, last line), 1-based, of ``owner.function`` in a parsed module. A
    module-level function may sit under a top-level ``if`` (sglang defines its FlashInfer helpers only
    when FlashInfer is importable)."""
    if owner:
        scope = next((node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner), [])
    else:
        scope = [*tree.body, *(child for node in tree.body if isinstance(node, ast.If)
                               for child in node.body + node.orelse)]
    node = next((node for node in scope if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.name == function), None)
    if node is None:
        return None
    first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
    return first, node.end_lineno


def patched_file(patches: tuple[SourcePatch, ...], path: Path) -> tuple[str, str]:
    """(the file's text, the text with ``patches`` applied): the patch checked against an sglang
    source file without importing it (releases whose kernels this machine lacks included)."""
    original = path.read_text()
    lines = original.splitlines(keepends=True)
    tree = ast.parse(original)
    spans = []
    for patch in patches:
        where = f"{patch.owner + '.' if patch.owner else ''}{patch.function} ({path})"
        span = _function_lines(tree, patch.owner, patch.function)
        if span is None:
            raise ReplayError(f"{where}: not found; this sglang version no longer matches the patch")
        spans.append((span, patch, where))
    for (first, last), patch, where in sorted(spans, key=lambda item: -item[0][0]):
        text = rewrite("".join(lines[first - 1:last]), list(patch.replacements), where)
        compile(textwrap.dedent(text), where, "exec")
        lines[first - 1:last] = [text]
    return original, "".join(lines)


def unified_diff(patches: tuple[SourcePatch, ...], site_packages: Path, repo_prefix: str = "python/") -> str:
    """The patches as a unified diff against the sglang installed under ``site_packages``, with the
    paths sglang's repository gives the files (python/sglang/...)."""
    chunks = []
    for path in dict.fromkeys(patch.path_in(site_packages) for patch in patches):
        original, patched = patched_file(tuple(p for p in patches if p.path_in(site_packages) == path), path)
        name = repo_prefix + str(path.relative_to(site_packages))
        chunks += difflib.unified_diff(original.splitlines(keepends=True), patched.splitlines(keepends=True),
                                       f"a/{name}", f"b/{name}")
    return "".join(chunks)


def _triton():
    from sglang.srt.layers.attention import triton_backend

    return triton_backend


def _topk_free_width() -> None:
    """#27338: the draft-decode kv_indices row sized max_bs x context, without topk."""
    import importlib

    def width_without_topk(num_seqs: int, topk: int, max_context_len: int) -> int:
        return num_seqs * max_context_len

    for module in ("sglang.srt.layers.attention.flashinfer_backend",
                   "sglang.srt.layers.attention.triton_backend"):
        try:
            importlib.import_module(module).draft_kv_indices_buffer_width = width_without_topk
        except ImportError:  # flashinfer absent on CPU: the Triton twin still carries the bug
            continue


_DRAFT_EXTEND_KV_LENS = "kv_lens = torch.clamp(seq_lens - extend_seq_lens, min=0).to(torch.int32)"


def _draft_extend_from_seq_lens() -> None:
    """#26651: DRAFT_EXTEND_V2 graph metadata built from seq_lens (prefix + extend)."""
    patch_source(_triton().TritonAttnBackend, "_update_draft_extend_buffers",
                 [(_DRAFT_EXTEND_KV_LENS, "kv_lens = seq_lens.to(torch.int32)")])


def _draft_extend_unclamped() -> None:
    """#26651 (second half): seq_lens - extend_seq_lens without the clamp at 0."""
    patch_source(_triton().TritonAttnBackend, "_update_draft_extend_buffers",
                 [(_DRAFT_EXTEND_KV_LENS, "kv_lens = (seq_lens - extend_seq_lens).to(torch.int32)")])


def _no_gpu_only_fallbacks() -> None:
    """#26738: Triton metadata without the None fallbacks of the GPU-only path."""
    patch_source(_triton().TritonAttnBackend, "init_forward_metadata", [
        ("if seq_lens_sum is None: seq_lens_sum = bs * self.max_context_len", "pass"),
        ("if forward_batch.extend_prefix_lens_cpu is not None: "
         "kv_indices_len = sum(forward_batch.extend_prefix_lens_cpu) else: "
         "kv_indices_len = bs * self.max_context_len",
         "kv_indices_len = sum(forward_batch.extend_prefix_lens_cpu)"),
        ("if forward_batch.extend_seq_lens_cpu is not None: "
         "max_extend_len = max(forward_batch.extend_seq_lens_cpu) else: "
         "max_extend_len = int(forward_batch.extend_seq_lens.max())",
         "max_extend_len = max(forward_batch.extend_seq_lens_cpu)"),
    ])


def _stale_seq_lens_sum() -> None:
    """#26753: after an ngram verify accepts tokens, seq_lens_sum is not advanced.

    The bug lived in the worker's batch bookkeeping, so it is replayed as the
    state the next verify forward receives: seq_lens advanced by the accepted
    tokens, seq_lens_sum still the previous total.
    """
    from harness.modes import target_verify

    original = target_verify.base_fields

    def stale_fields(state, forward_mode, **kwargs):
        fields = original(state, forward_mode, **kwargs)
        if fields["seq_lens_sum"] is not None and forward_mode.is_target_verify():
            accepted_last_verify = state.spec.window * state.spec.bs // 2
            fields["seq_lens_sum"] = max(fields["seq_lens_sum"] - accepted_last_verify, 0)
            if fields["spec_info"] is not None:
                fields["spec_info"].seq_lens_sum = fields["seq_lens_sum"]
        return fields

    target_verify.base_fields = stale_fields


def _undeclared_backend_trusted() -> None:
    """#26128: the per-backend needs_cpu_seq_lens decision before the fix.

    Pre-fix semantics replayed: every slot is asked for the flag directly (a
    missing slot raises) and a backend that does not declare it is taken as
    opting out.
    """
    from sglang.srt.managers import overlap_utils

    patch_source(overlap_utils, "decide_needs_cpu_seq_lens", [(
        'getattr(b, "needs_cpu_seq_lens", True) for b in attn_backends if b is not None',
        'b.needs_cpu_seq_lens if hasattr(b, "needs_cpu_seq_lens") or b is None else False '
        'for b in attn_backends')])


# --- fixes -------------------------------------------------------------------------------------

_FA = "sglang.srt.layers.attention.flashattention_backend"
_ROW_WIDTH = "self.max_kv_len"
_STATIC_WIDTH = ("# Static page-table width (upper bound). The device-side page-table build "
                 "# sizes to this constant, so no runtime host max is needed.")


def _kv_bound(context: str, count: int = 1) -> Swap:
    return Swap(context, "self.max_context_len", _ROW_WIDTH, count)


# findings/fa-draft-extend-past-context: FlashAttentionBackend bounds a request's KV
# length by the model's context, but a speculative step reads up to committed + num_draft_tokens,
# past it, into the headroom sglang gives every req_to_token row. Each KV-length bound becomes the
# row width; other uses of max_context_len (the verify mask, encoder tables, FA4's captured
# max_seqlen_k for plain decode) are left as they are.
FA_KV_PAST_CONTEXT = (
    SourcePatch(_FA, "FlashAttentionBackend", "__init__", ((
        f"{_STATIC_WIDTH} self.max_num_pages = ( self.max_context_len + self.page_size - 1 ) // self.page_size",
        "# A request's KV can run past the model context: under speculative decoding a verify\n"
        "# or draft extend reads up to committed + num_draft_tokens, and req_to_token rows\n"
        "# carry headroom for it (get_req_to_token_extra_context_len). Bound KV lengths by\n"
        "# the row width, not by max_context_len.\n"
        f"{_ROW_WIDTH} = self.req_to_token.shape[1]\n"
        "# Static page-table width (upper bound). The device-side page-table build\n"
        "# sizes to this constant, so no runtime host max is needed.\n"
        f"self.max_num_pages = (\n    {_ROW_WIDTH} + self.page_size - 1\n) // self.page_size"),)),
    # the eager path's bound when no CPU mirror is published (the page table's width)
    SourcePatch(_FA, "FlashAttentionBackend", "init_forward_metadata", (_kv_bound("else self.max_context_len"),)),
    # the CUDA-graph page tables (decode / draft decode, target verify, draft extend; the topk > 1
    # prefix tables) and the page-start offsets gathered into them
    SourcePatch(_FA, "FlashAttentionBackend", "init_cuda_graph_state", (
        _kv_bound("max_num_pages = (self.max_context_len + self.page_size - 1) // self.page_size"),
        _kv_bound("0, self.max_context_len, self.page_size, device=self.device", 3),
        _kv_bound('"page_table": torch.zeros( max_bs, self.max_context_len,', 2),
    )),
    # replay's bound without a CPU mirror: the pages it gathers (draft extend, topk > 1 draft decode)
    # and plain decode's scheduler-metadata estimate
    SourcePatch(_FA, "FlashAttentionBackend", "_apply_cuda_graph_metadata", (
        _kv_bound("else self.max_context_len", 3),)),
)


# findings/fa3-mla-tree-verify-page-slots: a tree verify (topk > 1) attends its draft tokens in a second
# call through the expand metadata, whose page table holds token slots (req_to_token, never divided by the
# page size). The dense path views its caches as pages of one token for that call; the absorbed-MLA path
# passes the latent and rope caches viewed in pages of page_size, so at page 16 or 64 each slot is read as
# a page number: another page's keys, or past the pool. View them as pages of one token too.
_EXPAND_CALL = "v_cache=c_kv_cache, qv=q_nope, page_table=self.forward_metadata_spec_decode_expand.page_table"
FA3_MLA_TREE_EXPAND_TOKEN_PAGES = (
    SourcePatch(_FA, "FlashAttentionBackend", "forward_extend", (
        Swap(f"k_cache=k_rope_cache, {_EXPAND_CALL}", "k_cache=k_rope_cache", "k_cache=k_rope.unsqueeze(1)"),
        Swap(f"k_cache=k_rope.unsqueeze(1), {_EXPAND_CALL}", "v_cache=c_kv_cache", "v_cache=c_kv.unsqueeze(1)"),
    )),
)

# findings/flashinfer-dflash-verify-window: the window wrapper is planned with
# window_left only without a spec input, so a DFlash verify (causal, no custom mask) runs with no
# per-query window over keys packed from the first query's window start. Plan the window for it too.
_FI = "sglang.srt.layers.attention.flashinfer_backend"
FLASHINFER_DFLASH_VERIFY_WINDOW = (
    SourcePatch(_FI, "FlashInferIndicesUpdaterPrefill", "update_sliding_window", (Swap(
        "if (wrapper_id == 0 and not use_ragged and spec_info is None)", "spec_info is None",
        '(spec_info is None or spec_info.spec_input_type.name == "DFLASH_VERIFY")'),)),
)

# findings/fa4-paged-tma-page-tail: on sm90, FA4 loads paged KV by TMA when the page
# size equals its key tile, whole pages, rows past the sequence included, and multiplies their V
# by zero weights: a non-finite value there poisons the output. Its cp.async path zero-fills those
# rows; use it for every page size (the compile key names the path, so the kernels differ). The
# sm100 branch reads the same test and changes with it: checked on sm90 only.
FA4_PAGED_KV_CPASYNC = (
    SourcePatch("sglang.kernels.ops.attention.flash_attn.cute.interface", "", "_flash_attn_fwd", (
        ("page_size not in [None, tile_n]", "page_size is not None"),)),
)


# findings/triton-kv-past-context: TritonAttnBackend sizes two buffers by the model's
# context, which a request at the context wall outgrows into the req_to_token headroom: the eager
# kv_indices when no host length is published (the GPU-only path; the index build writes past it) and
# the CUDA-graph verify mask (a verify's mask is num_draft_tokens x (seq_len + num_draft_tokens) a
# request; the replay copy refuses a larger one). Size both by the row width.
_TRITON = "sglang.srt.layers.attention.triton_backend"
_TRITON_ROW_WIDTH = "self.req_to_token.shape[1]"
TRITON_KV_PAST_CONTEXT = (
    SourcePatch(_TRITON, "TritonAttnBackend", "init_forward_metadata", (
        Swap("seq_lens_sum = bs * self.max_context_len", "self.max_context_len", _TRITON_ROW_WIDTH, 2),
        Swap("kv_indices_len = bs * self.max_context_len", "self.max_context_len", _TRITON_ROW_WIDTH),
    )),
    SourcePatch(_TRITON, "TritonAttnBackend", "init_cuda_graph_state", (
        Swap("max_bs=max_bs, max_context_len=self.max_context_len,", "self.max_context_len", _TRITON_ROW_WIDTH),
    )),
)


# findings/triton-swa-eager-host-sync: the eager window indices are sized by window_kv_indptr[-1], a device
# scalar, so every eager metadata init of a window layer waits on the GPU in a backend that promises not
# to; a window holds at most sliding_window_size keys a request, so bs x sliding_window_size bounds them
# on the host (the index build writes by window_kv_indptr, whatever the buffer's length).
TRITON_SWA_WINDOW_BOUND = (
    SourcePatch(_TRITON, "", "update_sliding_window_buffer", (
        Swap("window_kv_indices = torch.empty( window_kv_indptr[-1],", "window_kv_indptr[-1]",
             "bs * sliding_window_size"),
    )),
)


# findings/flashinfer-draft-kv-past-context: FlashInfer's multi-step draft sizes each
# step's kv_indices row bs x topk x max_context_len, eager and CUDA graph, but a draft step reads a
# request's committed KV plus the draft tokens, which at the context wall run into the req_to_token
# headroom; sglang's own assert_buffer_fits stops the forward. Size the row by the row width
# (pool_len, which the class already keeps for the index build).
FLASHINFER_DRAFT_KV_PAST_CONTEXT = (
    SourcePatch(_FI, "FlashInferMultiStepDraftBackend", "init_forward_metadata", (
        Swap("forward_batch.batch_size, self.topk, self.max_context_len", "self.max_context_len", "self.pool_len"),)),
    SourcePatch(_FI, "FlashInferMultiStepDraftBackend", "init_cuda_graph_state", (
        Swap("max_bs, self.topk, self.max_context_len", "self.max_context_len", "self.pool_len"),)),
)


# findings/flashinfer-window-ragged-extend: an extend over a window model runs its extend
# tokens against each other through one ragged wrapper, planned once for every layer kind and
# without window_left; FlashInfer picks the kernel at plan time, so the window layers' extend tokens
# see every earlier extend token, not the last window of them. Give each wrapper kind its own ragged
# wrapper, plan the window one with window_left, and pick by the layer's wrapper (the no-prefix
# call, which resets the window per call, passes the layer's window too).
_RAGGED_PER_WRAPPER = "self.prefill_wrappers_ragged[wrapper_id],"
FLASHINFER_WINDOW_RAGGED_EXTEND = (
    SourcePatch(_FI, "FlashInferAttnBackend", "__init__", ((
        'self.prefill_wrapper_ragged = BatchPrefillWithRaggedKVCacheWrapper( self.workspace_buffer, "NHD", '
        'backend=fmha_backend )',
        'self.prefill_wrapper_ragged = BatchPrefillWithRaggedKVCacheWrapper(\n'
        '    self.workspace_buffer, "NHD", backend=fmha_backend\n)\n'
        "# One ragged wrapper per wrapper kind: FlashInfer fixes the window at plan time, so\n"
        "# window and full layers cannot share one.\n"
        "self.prefill_wrappers_ragged = [self.prefill_wrapper_ragged] + [\n"
        '    BatchPrefillWithRaggedKVCacheWrapper(self.workspace_buffer, "NHD", backend=fmha_backend)\n'
        "    for _ in range(self.num_wrappers - 1)\n]"),)),
    SourcePatch(_FI, "FlashInferAttnBackend", "forward_extend", (
        Swap("self.prefill_wrapper_ragged.", "self.prefill_wrapper_ragged",
             "self.prefill_wrappers_ragged[self._get_wrapper_idx(layer)]", 2),
        ("causal=causal, sm_scale=layer.scaling, logits_soft_cap=logits_soft_cap,",
         "causal=causal,\nsm_scale=layer.scaling,\nwindow_left=layer.sliding_window_size,\n"
         "logits_soft_cap=logits_soft_cap,"),
    )),
    SourcePatch(_FI, "FlashInferIndicesUpdaterPrefill", "__init__", ((
        "self.prefill_wrapper_ragged = attn_backend.prefill_wrapper_ragged",
        "self.prefill_wrapper_ragged = attn_backend.prefill_wrapper_ragged\n"
        "self.prefill_wrappers_ragged = attn_backend.prefill_wrappers_ragged"),)),
    SourcePatch(_FI, "FlashInferIndicesUpdaterPrefill", "update_sliding_window", (
        Swap("self.call_begin_forward( self.prefill_wrapper_ragged,", "self.prefill_wrapper_ragged,", _RAGGED_PER_WRAPPER),
        ("window_left=( sliding_window_size if (wrapper_id == 0 and not use_ragged and spec_info is None) else -1 ),",
         "window_left=(\n    sliding_window_size\n    if (wrapper_id == 0 and not use_ragged and spec_info is None)\n"
         "    else -1\n),\nragged_window_left=sliding_window_size if wrapper_id == 0 else -1,"),
    )),
    SourcePatch(_FI, "FlashInferIndicesUpdaterPrefill", "update_cross_attention", (
        Swap("self.call_begin_forward( self.prefill_wrapper_ragged,", "self.prefill_wrapper_ragged,", _RAGGED_PER_WRAPPER),
    )),
    SourcePatch(_FI, "FlashInferIndicesUpdaterPrefill", "call_begin_forward", (
        ("window_left: int = -1,", "window_left: int = -1,\nragged_window_left: int = -1,"),
        ("self.head_dim, q_data_type=self.q_data_type,",
         "self.head_dim,\nq_data_type=self.q_data_type,\nwindow_left=ragged_window_left,"),
    )),
)


# findings/flashinfer-decode-graph-kv-past-context: the single-step backend's CUDA-graph
# kv_indices hold max_num_tokens x max_context_len, but a decode row at the context wall under
# speculative decoding (a frozen-KV MTP draft step) reads into the req_to_token headroom, and the
# index build writes past the buffer unchecked. Size it by the row width, as the multi-step fix does.
FLASHINFER_DECODE_GRAPH_KV_PAST_CONTEXT = (
    SourcePatch(_FI, "FlashInferAttnBackend", "init_cuda_graph_state", (
        Swap("(max_num_tokens * self.max_context_len,),", "self.max_context_len",
             "self.req_to_token_pool.req_to_token.shape[1]"),)),
)


# findings/flashinfer-merge-state-lse-base: forward_extend merges its ragged and paged parts
# with FlashInfer's merge_state, or, above 8192 / head_dim heads (its launch limit), with sglang's
# merge_state_triton. FlashInfer's LSEs are base 2 and the Triton kernel works in natural logs, so the
# fallback weighs the parts wrongly wherever both hold keys. Convert around the fallback.
FLASHINFER_MERGE_STATE_LSE_BASE = (
    SourcePatch(_FI, "", "_safe_merge_state", ((
        "return merge_state_triton(v_a, s_a, v_b, s_b)",
        "# FlashInfer's LSEs are base 2; merge_state_triton works in natural logs.\n"
        "ln2 = 0.6931471805599453  # math.log(2)\n"
        "v, s = merge_state_triton(v_a, s_a * ln2, v_b, s_b * ln2)\n"
        "return v, s / ln2"),)),
)


# findings/flashinfer-graph-workspace: the CUDA-graph verify and draft-extend wrappers plan
# split-kv in the shared float workspace (SGLANG_FLASHINFER_WORKSPACE_SIZE, 384 MiB), which nothing
# sizes by heads, head_dim or the captured batch; wide models outgrow it at capture. sglang already
# sizes the plain-EXTEND graph workspace by FlashInfer's formula: size these graphs' by it too, with a
# buffer of their own only when the shared one is too small.
FLASHINFER_GRAPH_WORKSPACE = (
    SourcePatch(_FI, "FlashInferAttnBackend", "init_cuda_graph_state", ((
        "self.cuda_graph_qo_indptr = [x.clone() for x in self.kv_indptr]",
        "self.cuda_graph_qo_indptr = [x.clone() for x in self.kv_indptr]\n"
        "# The verify / draft-extend graphs plan split-kv for the largest captured batch;\n"
        "# the shared workspace has a fixed size, so give them one that holds that plan.\n"
        "updater = self.indices_updater_prefill\n"
        "graph_prefill_bytes = self._full_cg_prefill_workspace_bytes(\n"
        "    max_bs,\n    max_num_tokens,\n    num_qo_heads=updater.num_qo_heads,\n"
        "    num_kv_heads=updater.num_kv_heads,\n    head_dim=updater.head_dim,\n"
        "    device=self.workspace_buffer.device,\n)\n"
        "self.cuda_graph_prefill_workspace_buffer = (\n"
        "    self.workspace_buffer\n    if graph_prefill_bytes <= self.workspace_buffer.numel()\n"
        "    else torch.empty(\n        graph_prefill_bytes, dtype=torch.uint8, device=self.workspace_buffer.device\n    )\n)"),)),
    SourcePatch(_FI, "FlashInferAttnBackend", "_create_prefill_wrappers", (
        Swap("BatchPrefillWithPagedKVCacheWrapper( self.workspace_buffer,", "self.workspace_buffer",
             "self.cuda_graph_prefill_workspace_buffer"),)),
)


# findings/flashmla-draft-attends-prefix-only: FlashMLAMultiStepDraftBackend runs every draft step's
# FlashMLABackend as a plain DECODE over seq_lens, the committed prefix, which the draft worker never
# moves between steps: step i attends the prefix but not the chain's tokens 0..i. Each step's backend
# learns how many keys it sees past seq_lens (i + 1; 0 outside a draft) and adds them where the decode
# reads lengths: the eager block table and scheduler metadata, the graph's, and the kernel's
# cache_seqlens (an add on the graph's static seq_lens, so replays follow it).
_FLASHMLA = "sglang.srt.layers.attention.flashmla_backend"
_DRAFT_STEP_LENS = "self.draft_step_lens"


def _declare_draft_step_lens(module: str, owner: str, after: str) -> SourcePatch:
    """``owner.__init__`` gets ``draft_step_lens = 0`` after its line ``after``: the keys a multi-step
    draft step sees past seq_lens (its chain's tokens), 0 outside a draft."""
    return SourcePatch(module, owner, "__init__", ((after, f"{after}\n# Keys a multi-step draft step sees past "
                                                          f"seq_lens (its chain's tokens): 0 outside a draft.\n"
                                                          f"{_DRAFT_STEP_LENS} = 0"),))


def _number_draft_steps(module: str, owner: str, append: str) -> SourcePatch:
    """The multi-step draft backend ``owner`` tells step i's backend it sees i + 1 chain tokens, right after
    ``append`` (its call appending that backend, as sglang formats it: the formatting is kept)."""
    numbered = f"{append}\nself.attn_backends[i].draft_step_lens = i + 1"
    return SourcePatch(module, owner, "__init__", ((append, numbered),))


FLASHMLA_DRAFT_STEP_LENS = (
    _declare_draft_step_lens(_FLASHMLA, "FlashMLABackend", "self.dcp_world_size = get_parallel().attn_dcp_size"),
    _number_draft_steps(_FLASHMLA, "FlashMLAMultiStepDraftBackend",
                        "self.attn_backends.append(\n    FlashMLABackend(\n        model_runner,\n"
                        "        skip_prefill=True,\n        kv_indptr_buf=self.kv_indptr[i],\n"
                        "        kv_last_page_len_buf=None,\n    )\n)"),
    SourcePatch(_FLASHMLA, "FlashMLABackend", "init_forward_metadata", (
        Swap("max_seqlen_pad = triton.cdiv(eager_max_k, PAGE_SIZE)", "eager_max_k",
             f"eager_max_k + {_DRAFT_STEP_LENS}"),
        Swap("forward_batch.req_pool_indices, forward_batch.seq_lens, None,", "forward_batch.seq_lens",
             f"forward_batch.seq_lens + {_DRAFT_STEP_LENS}"),
        Swap("get_mla_metadata( forward_batch.seq_lens.to(torch.int32), self.num_q_heads,",
             "forward_batch.seq_lens.to", f"(forward_batch.seq_lens + {_DRAFT_STEP_LENS}).to"),
    )),
    SourcePatch(_FLASHMLA, "FlashMLABackend", "_apply_decode_target_verify_metadata", ((
        "if forward_mode.is_target_verify(): seq_lens = seq_lens + self.num_draft_tokens",
        "if forward_mode.is_decode_or_idle():\n"
        f"    seq_lens = seq_lens + {_DRAFT_STEP_LENS}\n"
        "    if seq_lens_cpu is not None:\n"
        f"        seq_lens_cpu = seq_lens_cpu + {_DRAFT_STEP_LENS}\n"
        "if forward_mode.is_target_verify():\n"
        "    seq_lens = seq_lens + self.num_draft_tokens"),)),
    SourcePatch(_FLASHMLA, "FlashMLABackend", "forward_decode", (
        Swap("cache_seqlens=forward_batch.seq_lens.to(torch.int32),", "forward_batch.seq_lens.to",
             f"(forward_batch.seq_lens + {_DRAFT_STEP_LENS}).to", 2),)),
)


# findings/flashinfer-mla-draft-steps-miss-their-tokens: FlashInferMLAMultiStepDraftBackend builds each
# draft step's kv_indptr / kv_indices (the prefix and the chain's tokens up to the step) on spec_info,
# but the step's backend plans from seq_lens, the prefix: eagerly it leaves spec_info out (the wrapper
# attends the prefix only), and for the CUDA graph its host kv_indptr / kv_len arrays count the prefix
# only while the indices hold the drafts too (request r > 0 reads r x (step + 1) keys early). Pass
# spec_info eagerly, as the capture does, and count the step's chain tokens in the graph's host arrays
# (each step's backend learns them, i + 1; 0 outside a draft).
_FI_MLA = "sglang.srt.layers.attention.flashinfer_mla_backend"
FLASHINFER_MLA_DRAFT_STEP_KV = (
    _declare_draft_step_lens(_FI_MLA, "FlashInferMLAAttnBackend",
                             "self.token_to_kv_pool = model_runner.token_to_kv_pool"),
    _number_draft_steps(_FI_MLA, "FlashInferMLAMultiStepDraftBackend",
                        "self.attn_backends.append(\n    FlashInferMLAAttnBackend(\n        model_runner,\n"
                        "        skip_prefill=True,\n        kv_indptr_buf=self.kv_indptr[i],\n"
                        "        q_indptr_decode_buf=self.q_indptr_decode,\n    )\n)"),
    SourcePatch(_FI_MLA, "FlashInferMLAAttnBackend", "init_forward_metadata", ((
        "decode_wrapper=self.decode_wrapper, init_metadata_replay=False,",
        "decode_wrapper=self.decode_wrapper,\ninit_metadata_replay=False,\n"
        "spec_info=forward_batch.spec_info if forward_batch.forward_mode.is_decode() else None,"),)),
    SourcePatch(_FI_MLA, "FlashInferMLAAttnBackend", "_apply_cuda_graph_metadata", (
        Swap("kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)", "seq_lens_cpu[:bs].to",
             f"(seq_lens_cpu[:bs] + {_DRAFT_STEP_LENS}).to"),)),
)


# findings/spec-reserve-past-req-to-token-row: every speculative decode step reserves
# committed + get_alloc_reserve_per_decode() columns of a request's req_to_token row (the double buffer
# eagle_prepare_for_decode and DFlash's prepare_for_decode allocate), at every page size, but
# get_req_to_token_extra_context_len widens the row for it only at page size > 1: at page size 1 a tree
# (2 x topk x num_steps > 8 + num_draft_tokens) near the context writes its reserved slots into the next
# row. Apply the reserve at every page size (upstream would drop the condition).
_ALLOCATION_SIZING = "sglang.srt.mem_cache.allocation_sizing"
SPEC_RESERVE_ROW_WIDTH = (
    SourcePatch(_ALLOCATION_SIZING, "", "get_req_to_token_extra_context_len", (
        Swap("page_size > 1", "> 1", ">= 1"),)),
)


def _apply_all(patches: tuple[SourcePatch, ...]) -> Callable[[], None]:
    def apply() -> None:
        for patch in patches:
            patch.apply()

    return apply


# --- the registry ------------------------------------------------------------------------------

REPLAY, FIX = "replay", "fix"


@dataclass(frozen=True)
class Patch:
    """One patch: a seed-bug replay (kind REPLAY) or a fix (kind FIX)."""

    patch_id: str
    upstream: str
    summary: str
    apply: Callable[[], None]
    cells: str  # pytest -k expression: the cells a replay must fail, or a fix must turn green
    kind: str = REPLAY
    source: tuple[SourcePatch, ...] = ()  # a patch written as data (checkable without importing sglang)


PATCHES = {patch.patch_id: patch for patch in (
    Patch("pr27338-topk-free-width", "sglang#27338",
          "draft-decode CUDA-graph kv_indices sized max_bs x max_context_len, no topk factor",
          _topk_free_width, "draft_decode and topk4"),
    Patch("pr26651-seq-lens", "sglang#26651",
          "DRAFT_EXTEND_V2 graph kv_indptr/kv_indices from seq_lens instead of seq_lens - extend",
          _draft_extend_from_seq_lens, "draft_extend_v2 and (cg_meta or cuda_graph)"),
    Patch("pr26651-no-clamp", "sglang#26651",
          "DRAFT_EXTEND_V2 graph kv lengths not clamped at 0: padded rows go negative",
          _draft_extend_unclamped, "draft_extend_v2 and (cg_meta or cuda_graph)"),
    Patch("pr26738-gpu-only-none", "sglang#26738",
          "Triton metadata without None fallbacks for seq_lens_sum / extend_*_cpu on the GPU-only path",
          _no_gpu_only_fallbacks, "(gpu-only or no-mirrors) and triton"),
    Patch("pr26753-stale-seq-lens-sum", "sglang#26753",
          "seq_lens_sum not advanced after an ngram verify: next verify sizes kv_indices from a stale sum",
          _stale_seq_lens_sum, "target_verify and eager"),
    Patch("pr26128-needs-cpu-seq-lens", "sglang#26128",
          "needs_cpu_seq_lens decision: undeclared backends treated as opting out, missing slots not skipped",
          _undeclared_backend_trusted, "gpu-only or host_mirror_contract"),
    Patch("fa-kv-past-context", "findings/fa-draft-extend-past-context",
          "FlashAttentionBackend (FA3, FA4) bounds a request's KV length by the req_to_token row width, "
          "not max_context_len: eager page table, CUDA-graph page tables and replay fallbacks",
          _apply_all(FA_KV_PAST_CONTEXT), "past-context and (fa3 or fa4)", kind=FIX, source=FA_KV_PAST_CONTEXT),
    Patch("flashinfer-dflash-verify-window", "findings/flashinfer-dflash-verify-window",
          "FlashInfer plans its sliding-window wrapper with window_left for a DFlash verify too, not only "
          "without a spec input", _apply_all(FLASHINFER_DFLASH_VERIFY_WINDOW), "dflash-window and flashinfer",
          kind=FIX, source=FLASHINFER_DFLASH_VERIFY_WINDOW),
    Patch("triton-kv-past-context", "findings/triton-kv-past-context",
          "TritonAttnBackend sizes the GPU-only eager kv_indices and the CUDA-graph verify mask by the "
          "req_to_token row width, not max_context_len", _apply_all(TRITON_KV_PAST_CONTEXT),
          "past-context and triton", kind=FIX, source=TRITON_KV_PAST_CONTEXT),
    Patch("triton-swa-window-bound", "findings/triton-swa-eager-host-sync",
          "Triton sizes the eager sliding-window kv_indices by bs x sliding_window_size, a host bound, not by "
          "the device scalar window_kv_indptr[-1]", _apply_all(TRITON_SWA_WINDOW_BOUND),
          "triton and swa and not draft_decode", kind=FIX, source=TRITON_SWA_WINDOW_BOUND),
    Patch("flashinfer-draft-kv-past-context", "findings/flashinfer-draft-kv-past-context",
          "FlashInfer's multi-step draft sizes its kv_indices rows by the req_to_token row width, not "
          "max_context_len, eager and CUDA graph", _apply_all(FLASHINFER_DRAFT_KV_PAST_CONTEXT),
          "past-context and draft_decode and flashinfer", kind=FIX, source=FLASHINFER_DRAFT_KV_PAST_CONTEXT),
    Patch("fa4-paged-kv-cpasync", "findings/fa4-paged-tma-page-tail",
          "FA4 on sm90 loads paged KV by cp.async, which zero-fills rows past the sequence, for every page "
          "size instead of by TMA when the page equals its key tile", _apply_all(FA4_PAGED_KV_CPASYNC),
          "page-tail and fa4", kind=FIX, source=FA4_PAGED_KV_CPASYNC),
    Patch("flashinfer-window-ragged-extend", "findings/flashinfer-window-ragged-extend",
          "FlashInfer gives each wrapper kind its own ragged wrapper and plans the window layers' one with "
          "window_left, so extend tokens of a window layer see only their window of each other",
          _apply_all(FLASHINFER_WINDOW_RAGGED_EXTEND), "past-window and flashinfer and eager and not gen51-159", kind=FIX,
          source=FLASHINFER_WINDOW_RAGGED_EXTEND),
    Patch("flashinfer-decode-graph-kv-past-context", "findings/flashinfer-decode-graph-kv-past-context",
          "FlashInfer sizes its CUDA-graph kv_indices by the req_to_token row width, not max_context_len, so a "
          "decode row at the context wall stays inside it", _apply_all(FLASHINFER_DECODE_GRAPH_KV_PAST_CONTEXT),
          "past-context and frozen_kv_mtp_draft and flashinfer", kind=FIX,
          source=FLASHINFER_DECODE_GRAPH_KV_PAST_CONTEXT),
    Patch("flashinfer-merge-state-lse-base", "findings/flashinfer-merge-state-lse-base",
          "FlashInfer's base-2 LSEs are converted to natural logs around sglang's Triton merge, the fallback "
          "for more query heads than FlashInfer's merge kernel launches", _apply_all(FLASHINFER_MERGE_STATE_LSE_BASE),
          "merge-state-b1k1s4p64d256h64x8 and flashinfer", kind=FIX,
          source=FLASHINFER_MERGE_STATE_LSE_BASE),
    Patch("spec-reserve-row-width", "findings/spec-reserve-past-req-to-token-row",
          "req_to_token rows get the decode reservation's headroom at every page size, not only above 1, so a "
          "speculative request near the context keeps its reserved slots in its own row",
          _apply_all(SPEC_RESERVE_ROW_WIDTH), "reserve-wall", kind=FIX, source=SPEC_RESERVE_ROW_WIDTH),
    Patch("flashinfer-mla-draft-step-kv", "findings/flashinfer-mla-draft-steps-miss-their-tokens",
          "FlashInfer MLA's draft step i plans seq_lens + i + 1 keys (the prefix and the chain's tokens up to "
          "itself): eagerly from the draft's spec_info, in the CUDA graph in its host kv_indptr and lengths",
          _apply_all(FLASHINFER_MLA_DRAFT_STEP_KV), "draft_decode and flashinfer_mla", kind=FIX,
          source=FLASHINFER_MLA_DRAFT_STEP_KV),
    Patch("flashmla-draft-step-lens", "findings/flashmla-draft-attends-prefix-only",
          "FlashMLA's draft step i attends seq_lens + i + 1 keys (the prefix and the chain's tokens up to "
          "itself), eager and CUDA graph", _apply_all(FLASHMLA_DRAFT_STEP_LENS),
          "draft_decode and flashmla", kind=FIX, source=FLASHMLA_DRAFT_STEP_LENS),
    Patch("fa3-mla-tree-expand-token-pages", "findings/fa3-mla-tree-verify-page-slots",
          "FA3's absorbed-MLA tree verify reads its draft tokens through a page table of token slots with the "
          "caches viewed as pages of one token, as the dense path does", _apply_all(FA3_MLA_TREE_EXPAND_TOKEN_PAGES),
          "fa3_mla and target_verify and page64", kind=FIX, source=FA3_MLA_TREE_EXPAND_TOKEN_PAGES),
    Patch("flashinfer-graph-workspace", "findings/flashinfer-graph-workspace",
          "FlashInfer sizes the float workspace of its CUDA-graph verify and draft-extend wrappers by the "
          "split-kv plan of the largest captured batch, not the fixed shared workspace",
          _apply_all(FLASHINFER_GRAPH_WORKSPACE), "graph-workspace and flashinfer", kind=FIX,
          source=FLASHINFER_GRAPH_WORKSPACE),
)}
SEED_BUGS = {patch_id: patch for patch_id, patch in PATCHES.items() if patch.kind == REPLAY}
FIXES = {fix_id: patch for fix_id, patch in PATCHES.items() if patch.kind == FIX}


def inject(bug_id: str) -> Patch:
    try:
        bug = SEED_BUGS[bug_id]
    except KeyError:
        raise ReplayError(f"unknown replay {bug_id!r}; known: {', '.join(SEED_BUGS)}") from None
    bug.apply()
    return bug


def apply_fix(fix_id: str) -> Patch:
    """Patch the installed sglang toward fix ``fix_id``; a backend module this machine cannot import
    (FA3/FA4 without their kernels, on CPU) has nothing to patch, and its cells skip anyway."""
    try:
        fix = FIXES[fix_id]
    except KeyError:
        raise ReplayError(f"--apply-fix {fix_id!r}: no such fix; known fixes: {', '.join(FIXES)} "
                          "(harness/bugs/seed_bugs.py FIXES)") from None
    try:
        fix.apply()
    except ImportError as error:
        if not _kernels_missing(error):
            raise
    return fix


def requested_fixes(fix: str | None) -> list[str]:
    """The fixes an --apply-fix value names: one, or several comma-separated (a cell that shows two bugs
    passes only with both fixed)."""
    return [part.strip() for part in (fix or "").split(",") if part.strip()]


def apply_requested(replay: str | None, fix: str | None) -> None:
    """The patches a run asks for (--replay, --apply-fix), in that order; ReplayError if one cannot apply."""
    if replay:
        inject(replay)
    for fix_id in requested_fixes(fix):
        apply_fix(fix_id)


def _kernels_missing(error: ImportError) -> bool:
    """The patched module cannot be imported on this machine because a kernel package is absent."""
    return error.name is not None and error.name.split(".")[0] in {"sgl_kernel", "cutlass", "flashinfer"}


def main(argv: list[str] | None = None) -> int:
    """python -m harness.bugs.seed_bugs diff FIX [--site-packages DIR]: the fix as a unified diff against
    the installed sglang (or the one under DIR), with sglang's repository paths."""
    import importlib.util

    from harness.base import cli

    parser = cli.Parser(prog="python -m harness.bugs.seed_bugs", description=main.__doc__.splitlines()[0])
    parser.add_argument("command", choices=["diff"])
    parser.add_argument("fix", choices=sorted(FIXES))
    parser.add_argument("--site-packages", type=Path, default=None,
                        help="the folder holding an sglang package (default: the installed one's)")
    args = parser.parse_args(argv)
    site_packages = args.site_packages or Path(importlib.util.find_spec("sglang").origin).parent.parent
    try:
        sys.stdout.write(unified_diff(FIXES[args.fix].source, site_packages))
    except (ReplayError, OSError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
