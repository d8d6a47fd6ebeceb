"""Traits of a case: facts about the state it puts a backend in that no name or glob shows.

A generated case is named by its draw and shape (gen21-52-b240k1s5...), so a KNOWN_FAILURES.md entry
cannot say "every cell whose rows run past the model context" with a glob over names. A trait is
such a fact, computed from the case itself, once, by one rule; an entry selects on it with its
`traits` field, the records carry it (so a report says why a cell is where it is), and the generated
tier passes over draws a known failure covers by trait as it does by name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from harness.base.case_spec import Case
from harness.modes import MODES
from harness.modes.scheduler_rules import production_row_lens


def furthest_row_position(case: Case) -> int:
    """One past the furthest req_to_token row position any forward of the case reads or writes."""
    steps = MODES[case.mode].steps(case.spec)
    written = [position + 1 for step in steps for _, position in step.writes]
    read = [query.spans[-1][1] for step in steps for query in step.queries if query.spans]
    return max(written + read, default=0)


# FlashInfer's shared float workspace (sglang's SGLANG_FLASHINFER_WORKSPACE_SIZE default, both releases)
FLASHINFER_WORKSPACE_BYTES = 384 * 1024 * 1024
_PREFILL_GRAPH_FORWARDS = ("TARGET_VERIFY", "DRAFT_EXTEND_V2")  # graphs FlashInfer plans as a batch prefill


def flashinfer_graph_split_kv_bytes(case: Case) -> int:
    """The float workspace FlashInfer's split-kv plan asks for when a prefill-kind CUDA graph of the
    case is captured at its largest capture size (scheduler.cuh, CUDA-graph sizing: the query tiles of
    the whole padded batch as if one request held every row, plus one per further request; tmp_v and
    tmp_s). The term that only small batches reach (2 x SMs / KV heads) is left out, so the figure
    is a lower bound: a case it puts over the workspace overflows on every Hopper."""
    spec = case.spec
    if MODES[case.mode].forward_mode not in _PREFILL_GRAPH_FORWARDS or not spec.capture_bs:
        return 0
    slots = max(spec.capture_bs)
    rows = slots * MODES[case.mode].tokens_per_request(spec)
    group = spec.num_heads // spec.num_kv_heads
    longest = (rows - slots + 1) * group
    tile = 128 if longest > 64 and spec.head_dim < 256 else 64 if longest > 16 else 16
    tiles = -(-rows * group // tile) + slots - 1
    return spec.num_heads * tiles * tile * (spec.head_dim + 1) * 4


# FA3's query-row and key tile (kBlockM, kBlockN) for MLA's head dims (64 rope + 512 latent) on sm90, as
# flash-attention's get_pagedkv_tma reads them (hopper/flash_api.cpp, read in public copies).
FA3_MLA_TILE = 64


def fa3_mla_paged_tma_tail(case: Case) -> bool:
    """Does an FA3 MLA forward of the case load paged K/V by TMA while some request's last page is partly
    unwritten? get_pagedkv_tma takes TMA when the page size is a multiple of the key tile and a launch's
    longest request has more query rows than the row tile (MLA's one KV head: query tokens x heads);
    TMA loads whole pages, so the unwritten rest of a request's last page enters P @ V
    (findings/fa3-mla-paged-tma-page-tail). A tree splits in two calls (the fa3-cascade threshold): in
    verify the paged call reads the committed prefix only; in a paged draft decode the prefix call reads
    whole pages only (the fa3-draft-page-split threshold: the last partial page goes with the branch)."""
    spec = case.spec
    if spec.family != "mla" or spec.page_size % FA3_MLA_TILE:
        return False
    forward_mode, tree = MODES[case.mode].forward_mode, spec.topk > 1
    if tree and forward_mode == "DECODE":
        return False
    prefix_call = tree and forward_mode == "TARGET_VERIFY"
    for step in MODES[case.mode].steps(spec):
        rows = Counter(query.request for query in step.queries)
        if max(rows.values(), default=0) * spec.num_heads <= FA3_MLA_TILE:
            continue
        # a request's keys end where its last query's do (a step lists each request's queries in order)
        ends = spec.prefix_lens if prefix_call else {
            query.request: query.spans[-1][1] for query in step.queries if query.spans}.values()
        if any(end % spec.page_size for end in ends):
            return True
    return False


@dataclass(frozen=True)
class CaseTrait:
    name: str
    why: str  # what the state is and why it matters, for the docs and error lines
    holds: Callable[[Case], bool]


TRAITS: dict[str, CaseTrait] = {trait.name: trait for trait in (
    CaseTrait(
        "past-context",
        "a forward reads or writes a row position at or past the model's context length: sglang gives "
        "every req_to_token row speculative headroom past context_len (allocation_sizing), and a request "
        "at the context wall uses it, while backends that size their tables by context_len end there",
        lambda case: furthest_row_position(case) > case.spec.model_context_len,
    ),
    CaseTrait(
        "reserve-past-row",
        "at page size 1, a row production reaches while a step runs (its window and the decode reservation, "
        "harness/modes/scheduler_rules.py) is longer than the context + 4 + num_draft_tokens columns sglang gives a "
        "row there (allocation_sizing.get_req_to_token_extra_context_len widens it by the reserve only above "
        "page size 1)",
        lambda case: case.spec.page_size == 1 and max(production_row_lens(MODES[case.mode], case.spec)) > (
            case.spec.model_context_len + 4 + MODES[case.mode].num_draft_tokens(case.spec)),
    ),
    CaseTrait(
        "window-inside-extend",
        "a draft extend over a sliding-window layer with more extend tokens than the window: the extend "
        "tokens must clip each other by the window too, which no case with fewer extend tokens tests",
        lambda case: (MODES[case.mode].forward_mode == "DRAFT_EXTEND_V2" and case.spec.sliding_window > 0
                      and max(case.spec.input_lens or [0]) > case.spec.sliding_window),
    ),
    CaseTrait(
        "flashinfer-graph-workspace",
        "a verify or draft-extend CUDA graph whose FlashInfer split-kv plan at capture needs more float "
        "workspace than sglang's fixed 384 MiB (wide heads, head_dim 256, large capture sizes)",
        lambda case: flashinfer_graph_split_kv_bytes(case) > FLASHINFER_WORKSPACE_BYTES,
    ),
    CaseTrait(
        "fa3-mla-paged-tma-tail",
        f"an MLA forward at a page size FA3 loads by TMA (a multiple of {FA3_MLA_TILE}) whose longest request "
        f"has more than {FA3_MLA_TILE} query rows (query tokens x heads), while some request's last page is "
        "partly unwritten: FA3 loads whole pages and the unwritten tail enters its output",
        fa3_mla_paged_tma_tail,
    ),
)}


def traits_of(case: Case) -> tuple[str, ...]:
    """The names of the traits that hold for ``case``, in registry order.

    Cached by the case's content (its name aside): every cell of a case, and every look-up of the
    ledger for one cell (collection, the verdict, the generator passing over a draw), asks again,
    and a trait may walk every query of a production-sized batch.
    """
    key = _content(case)
    if key not in _FOUND:
        _FOUND[key] = tuple(name for name, trait in TRAITS.items() if trait.holds(case))
    return _FOUND[key]


def remember_traits(case: Case, names: tuple[str, ...]) -> None:
    """Take the traits another process found for this case (the generated tier's draw processes,
    harness/search/generated.py), so that this one does not walk the case again."""
    _FOUND[_content(case)] = tuple(names)


def _content(case: Case) -> tuple[str, str]:
    return case.mode, case.spec.model_dump_json(exclude={"name"})


_FOUND: dict[tuple[str, str], tuple[str, ...]] = {}
