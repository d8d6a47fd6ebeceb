"""The five sglang bugs attn-harness exists to catch, as injectable pre-fix behaviour.

Each replay is a patched copy of the installed sglang function it concerns,
made from that function's own source with the fix reverted (or, where the bug
lived outside any backend, the faulty batch state the next forward received).
A replay whose source pattern no longer matches stops with an error naming the
function: it is never silently a no-op. Replays are applied only inside a
replay run (`--replay BUG`), never in a normal run.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable


class ReplayError(RuntimeError):
    """A replay could not be applied to the installed sglang."""


def patch_source(owner, name: str, replacements: list[tuple[str, str]]) -> None:
    """Replace ``owner.name`` by a copy of its source with ``replacements`` applied.

    Each pattern is a regular expression in which a single space stands for any
    run of whitespace, so patterns read like the code and survive re-indentation;
    every pattern must match at least once.
    """
    function = getattr(owner, name)
    source = textwrap.dedent(inspect.getsource(function))
    for old, new in replacements:
        pattern = r"\s+".join(re.escape(word) for word in old.split())
        source, count = re.subn(pattern, new, source)
        if not count:
            raise ReplayError(f"{owner.__name__}.{name}: pattern {old[:60]!r} not found; "
                              "this sglang version no longer matches the replay")
    namespace: dict = {}
    module = sys.modules[function.__module__]
    exec(compile(source, f"<replay of {owner.__name__}.{name}>", "exec"), module.__dict__, namespace)
    setattr(owner, name, namespace[name])


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
            accepted_last_verify = state.spec.input_lens[0] * state.spec.bs // 2
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


@dataclass(frozen=True)
class SeedBug:
    bug_id: str
    upstream: str
    summary: str
    inject: Callable[[], None]
    cells: str  # pytest -k expression: the part of the matrix that must kill it


SEED_BUGS = {bug.bug_id: bug for bug in (
    SeedBug("pr27338-topk-free-width", "sglang#27338",
            "draft-decode CUDA-graph kv_indices sized max_bs x max_context_len, no topk factor",
            _topk_free_width, "draft_decode and topk4"),
    SeedBug("pr26651-seq-lens", "sglang#26651",
            "DRAFT_EXTEND_V2 graph kv_indptr/kv_indices from seq_lens instead of seq_lens - extend",
            _draft_extend_from_seq_lens, "draft_extend_v2 and (cg_meta or cuda_graph)"),
    SeedBug("pr26651-no-clamp", "sglang#26651",
            "DRAFT_EXTEND_V2 graph kv lengths not clamped at 0: padded rows go negative",
            _draft_extend_unclamped, "draft_extend_v2 and (cg_meta or cuda_graph)"),
    SeedBug("pr26738-gpu-only-none", "sglang#26738",
            "Triton metadata without None fallbacks for seq_lens_sum / extend_*_cpu on the GPU-only path",
            _no_gpu_only_fallbacks, "(gpu-only or no-mirrors) and triton"),
    SeedBug("pr26753-stale-seq-lens-sum", "sglang#26753",
            "seq_lens_sum not advanced after an ngram verify: next verify sizes kv_indices from a stale sum",
            _stale_seq_lens_sum, "target_verify and eager"),
    SeedBug("pr26128-needs-cpu-seq-lens", "sglang#26128",
            "needs_cpu_seq_lens decision: undeclared backends treated as opting out, missing slots not skipped",
            _undeclared_backend_trusted, "gpu-only or host_mirror_contract"),
)}


def inject(bug_id: str) -> SeedBug:
    try:
        bug = SEED_BUGS[bug_id]
    except KeyError:
        raise ReplayError(f"unknown replay {bug_id!r}; known: {', '.join(SEED_BUGS)}") from None
    bug.inject()
    return bug
