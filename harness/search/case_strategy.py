"""A hypothesis strategy over the case schema: cases the hand-picked ones never reach.

Each draw is one cell's worth of case: a mode, a model shape, a batch and the one (backend,
runner form, capture size, padding) it runs with. Lengths are drawn from the values backends
size buffers and bounds from: the model's context wall (the longest committed prefix a
speculative step runs on, scheduler_rules.max_committed_prefix) and one token short of it, page
boundaries, sglang's capture sizes and their neighbours, the shortest prefixes a mode runs on
(0 and 1 tokens; 1 and 2 in draft decode, whose committed length is never 0), one request and
many. Head shapes and the model's sliding window come as the profile gives them
(harness/search/draw_caps.py). From a HeadGrid (the CPU's) heads are any product of its values, and
the window is drawn at the edges of a request's prefix: the smallest window sglang serves,
just below, at and just above the prefix, the page boundaries next to it, over every row. From
served models (the GPU's) heads are one model's shard and the window one of its windows, so
that cells share compiled kernels; the edge moves to the prefix, one request's drawn where the
window starts to cut its row. Dtypes are drawn by the profile's weights (the GPU's: mostly
bf16, as production serves). Validity is the schema's own: a draw goes through the case schema,
the loader's mode and size rules (cases.spec_problem) and the backend entry's skip rules, and
is redrawn if any says no or if it costs more than the profile's caps. The names drawn come
from the registries (MODES, the machine's BACKENDS x RUNNER_FORMS) and the schema's
vocabularies. The smallest or default value of every choice comes first, so hypothesis shrinks
toward it.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import get_args

from hypothesis import reject
from hypothesis import strategies as st
from pydantic import ValidationError

from harness.modes.scheduler_rules import max_committed_prefix
from harness.base.case_spec import CaseSpec, HostMirrors, KvLayout, PadStyle
from harness.case.cases import spec_from_fields, spec_problem
from harness.cell.cell_matrix import combination_skip_reason
from harness.families import family_of_backend
from harness.search.draw_caps import DEFAULT_DECODE_MAX_BS, DrawProfile, HeadGrid, cell_cost, machine_runs
from harness.modes import MODES
from harness.runners import RUNNER_FORMS
from harness.fixtures.sglang_env import decode_capture_sizes

KV_LAYOUTS, HOST_MIRRORS, PAD_STYLES = get_args(KvLayout), get_args(HostMirrors), get_args(PadStyle)
DEFAULT_FAMILY = CaseSpec.model_fields["family"].default  # the family of a case that names none
DRAFT_WINDOWS, DRAFT_SINKS = (0, 1, 16, 64), (0, 1, 4)
SMALLEST_MODEL_WINDOW = 2  # a sliding_window of 1 reaches sglang's layer as 0, which it reads as no window
MODEL_WINDOW_WEIGHT = 3  # a model's own windows (none included), each 3 times as often as the smallest
SHAPE_ATTEMPTS, SIZE_ATTEMPTS = 4, 4  # bounded: hypothesis caps the choices of one draw


@dataclass(frozen=True)
class DrawnCase:
    """A case drawn for one cell: its mode and its fields (backends, runners, capture_bs pinned)."""

    mode: str
    fields: dict

    @property
    def key(self) -> tuple:
        return (self.mode, tuple(sorted((k, repr(v)) for k, v in self.fields.items())))


@dataclass(frozen=True)
class Heads:
    """What the first draw of a case's sizes fixes of its heads, and the choices it leaves, drawn after
    context and batch (where the CPU profile's draws have always drawn them): none for a model (one
    value each, which hypothesis draws without a choice), the GQA ratios and head dims for a HeadGrid."""

    num_kv_heads: int
    gqa_ratios: tuple[int, ...]
    head_dims: tuple[int, ...]
    sliding_windows: tuple[int, ...] | None  # the model's; None (no model): windows drawn around a prefix


@functools.lru_cache(maxsize=None)
def head_choices(profile: DrawProfile) -> tuple[Heads, ...]:
    """What a profile's heads offer a draw: a HeadGrid's each kv_heads, or each served model."""
    heads = profile.heads
    if isinstance(heads, HeadGrid):
        return tuple(Heads(kv, heads.gqa_ratios, heads.head_dims, None) for kv in heads.kv_heads)
    return tuple(Heads(model.num_kv_heads, (model.num_heads // model.num_kv_heads,), (model.head_dim,),
                        model.sliding_windows) for model in heads)


@functools.lru_cache(maxsize=None)
def _weighted(choices: tuple[tuple, ...]) -> st.SearchStrategy:
    """Each (value, weight)'s value as often as its weight says; the first is where hypothesis shrinks to."""
    return st.sampled_from([value for value, weight in choices for _ in range(weight)])


def _neighbours(values) -> list[int]:
    return sorted({n for v in values for n in (v - 1, v, v + 1) if n >= 1})


@functools.lru_cache(maxsize=None)  # hypothesis validates each new strategy: build once
def _batch_size(profile: DrawProfile) -> st.SearchStrategy[int]:
    """One request; sglang's capture sizes, their neighbours and the sizes above the largest
    (where sglang runs eagerly); anything up to the cap."""
    sizes = decode_capture_sizes(DEFAULT_DECODE_MAX_BS)
    limit = profile.max_bs.limit
    edges = [n for n in sorted({*_neighbours(sizes), *range(sizes[-1] + 1, limit + 1)}) if n <= limit]
    return st.one_of(st.just(1), st.sampled_from(edges), st.integers(1, limit))


@functools.lru_cache(maxsize=None)
def _prefix_limit(wall: int, scales: tuple[int, ...], most: int | None) -> st.SearchStrategy[int]:
    """A case's longest prefix: one of the profile's scales (tiny to long), or the context wall
    (max_committed_prefix); none over ``most`` where the profile bounds a batch's tokens (its smallest
    scale if none fits).

    Drawn per case so that many requests can come with short prefixes (a large decode batch)
    and a few with long ones, within the caps.
    """
    limits = [scale for scale in scales if scale < wall] + [wall]
    fitting = [limit for limit in limits if most is None or limit <= most]
    return st.sampled_from(fitting or limits[:1])


@functools.lru_cache(maxsize=None)
def _prefix_len(limit: int, page_size: int, shortest: int) -> st.SearchStrategy[int]:
    """The shortest prefixes the mode runs on (``shortest``: 0, or 1 in draft decode) and the next
    few, page boundaries, the limit itself (the context wall when the limit is max_committed_prefix)
    and one short of it or a little more, anything up to it. Never below ``shortest``, so no draw is rejected for it."""
    return st.one_of(
        st.integers(shortest, min(shortest + 3, limit)),
        st.builds(lambda page, step: min(max(page * page_size + step, shortest), limit),
                  st.integers(1, max(limit // page_size, 1)), st.sampled_from((-1, 0, 1))),
        st.sampled_from((limit, max(limit - 1, shortest))),
        st.builds(lambda back: max(limit - back, shortest), st.integers(1, page_size + 8)),
        st.integers(shortest, limit),
    )


# Batches up to this size draw every request's prefix on its own; larger ones draw this many and deal
# them out (_prefix_lens). The CPU profile's batches (12 at most) are all below it.
PREFIXES_DRAWN_EACH = 16


@st.composite
def _prefix_lens(draw, bs: int, limit: int, page_size: int, shortest: int) -> list[int]:
    """A batch's prefixes. A large batch draws PREFIXES_DRAWN_EACH of them as a small one does, then
    deals them out to the rest of its requests in a seeded order (one draw): every edge a drawn prefix
    stands on still comes, in any position of the batch, at a cost that does not grow with bs. Drawn
    one by one, a scale-tier batch of 1,024 made about a thousand draws and took 1.5 s a case."""
    each = _prefix_len(limit, page_size, shortest)
    if bs <= PREFIXES_DRAWN_EACH:
        return draw(st.lists(each, min_size=bs, max_size=bs))
    drawn = draw(st.lists(each, min_size=PREFIXES_DRAWN_EACH, max_size=PREFIXES_DRAWN_EACH))
    order = random.Random(draw(st.integers(0, 2**32 - 1)))
    dealt = drawn + [order.choice(drawn) for _ in range(bs - len(drawn))]
    order.shuffle(dealt)
    return dealt


@functools.lru_cache(maxsize=None)
def _capture_bs(bs: int, profile: DrawProfile) -> st.SearchStrategy[int]:
    """sglang's pick (the smallest capture size >= bs), the next one, bs itself, bs + 1."""
    sizes = [c for c in profile.capture_sizes if c >= bs]
    picks = dict.fromkeys(c for c in (*sizes[:2], bs, bs + 1) if c <= profile.max_capture_bs.limit)
    return st.sampled_from(list(picks) or [bs])


def why_not_runnable(mode: str, fields: dict, profile: DrawProfile) -> str | None:
    """Why drawn fields are no case for this profile: the schema, the loader's rules, the backend, the caps."""
    try:
        spec = spec_from_fields(fields)
    except ValidationError as error:
        return str(error.errors()[0]["msg"])
    problem = spec_problem(mode, spec)
    if problem:
        return ": ".join(problem)
    graph = RUNNER_FORMS[spec.runners[0]].graph
    if graph and spec.bs > decode_capture_sizes(DEFAULT_DECODE_MAX_BS)[-1]:
        return "above the largest capture size sglang runs the batch eagerly"
    return (combination_skip_reason(mode, spec.backends[0], spec.runners[0], spec)
            or cell_cost(MODES[mode], spec, graph).over(profile))


@st.composite
def _shape(draw, mode: str, profile: DrawProfile) -> dict:
    """The case's kind: how it runs, the speculative shape, paging, the mirrors, the layout."""
    backend, runner = draw(st.sampled_from(machine_runs()))
    shape = dict(
        name="gen", backends=[backend], runners=[runner],
        topk=draw(st.one_of(st.just(1), st.integers(1, profile.max_topk))),
        num_steps=draw(st.integers(1, profile.max_steps)),
        page_size=draw(st.sampled_from(profile.page_sizes)), dtype=draw(_weighted(profile.dtypes)),
        host_mirrors=draw(st.sampled_from(HOST_MIRRORS)), kv_layout=draw(st.sampled_from(KV_LAYOUTS)),
        seed=draw(st.integers(0, 9999)),
    )
    if MODES[mode].takes_draft_window:
        window = draw(st.sampled_from(DRAFT_WINDOWS))
        shape.update(draft_window=window, draft_sink=draw(st.sampled_from(DRAFT_SINKS)) if window else 0)
    return shape


@st.composite
def _sliding_window(draw, prefix_lens: list[int], reach: int, page_size: int) -> int:
    """The model's window where no model gives it (a HeadGrid's draws): none (0, where hypothesis
    shrinks to) half the time; else its edges, drawn around one request's prefix: the smallest window
    sglang serves, just below, at and just above the prefix, the page boundaries next to it, a window
    over every row (the longest prefix + ``reach``, the tokens a query reaches past it), or any length
    up to that."""
    if not draw(st.booleans()):
        return 0
    prefix = draw(st.sampled_from(prefix_lens))
    over_every_row = max(prefix_lens) + reach
    pages = {edge for boundary in (prefix // page_size * page_size, -(-prefix // page_size) * page_size)
             for edge in (boundary - 1, boundary, boundary + 1)} if page_size > 1 else set()
    edges = {SMALLEST_MODEL_WINDOW, prefix - 1, prefix, prefix + 1, over_every_row, *pages}
    return draw(st.one_of(st.sampled_from(sorted(w for w in edges if w >= SMALLEST_MODEL_WINDOW)),
                          st.integers(SMALLEST_MODEL_WINDOW, max(over_every_row, SMALLEST_MODEL_WINDOW))))


@st.composite
def _model_window(draw, model_windows: tuple[int, ...], context_len: int, prefix_lens: list[int], reach: int,
                  shortest: int, wall: int) -> dict:
    """The model's window, then one request's prefix at its edges.

    The window is one of the model's (its layers'), none first; one as long as the context is full
    attention, drawn as none; a model with windowed layers also draws the smallest window sglang serves.
    Production windows are few, so the boundary moves to the prefix: half the time one request's prefix
    is drawn where the window starts to cut its row (``reach``: the tokens a query reaches past it),
    from every query seeing the whole row (window - reach - 1, window - reach) over its last query
    losing the row's first key (window - reach + 1) to its first query's row of exactly the window
    (window - 1) and past (window, window + 1); never below ``shortest`` (the mode's shortest prefix)
    or past the wall.
    """
    windows = sorted({w if w < context_len else 0 for w in model_windows})
    smallest = ((SMALLEST_MODEL_WINDOW, 1),) if any(model_windows) else ()
    window = draw(_weighted(tuple((w, MODEL_WINDOW_WEIGHT) for w in windows) + smallest))
    if window and draw(st.booleans()):
        edges = (window - reach - 1, window - reach, window - reach + 1, window - 1, window, window + 1)
        prefix = draw(st.sampled_from(sorted(set(edges))))
        index = draw(st.integers(0, len(prefix_lens) - 1))
        prefix_lens = [*prefix_lens[:index], min(max(prefix, shortest), wall), *prefix_lens[index + 1:]]
    return dict(sliding_window=window, prefix_lens=prefix_lens)


@functools.lru_cache(maxsize=None)
def _sizes(mode: str, graph: bool, page_size: int, num_steps: int, profile: DrawProfile,
           model_window: bool = False, family: str = DEFAULT_FAMILY) -> st.SearchStrategy:
    """The case's sizes: model dimensions, context, batch, window, prefixes, capture size, and (where
    the case has no draft window: the two do not combine) the model's sliding window.

    The window comes before the prefixes: the wall they are drawn up to depends on it. Another
    family's case takes one of the profile's shards of that family (its model and heads) for the
    dense head shapes, and no sliding window (the MLA models served have none).
    """
    spec_mode = MODES[mode]
    windowed = spec_mode.windowed  # a case gives the window each request brings

    @st.composite
    def sizes(draw) -> dict:
        dense = family == DEFAULT_FAMILY
        heads = draw(st.sampled_from(head_choices(profile))) if dense else None
        shard = None if dense else draw(st.sampled_from(profile.shards_of(family)))
        context_len = draw(st.sampled_from(profile.context_lens))
        bs = draw(_batch_size(profile))
        # a fixed window per request: the chain's num_steps + 1, or any tree's
        window = draw(st.one_of(st.just(num_steps + 1), st.integers(2, profile.max_window.limit))) if windowed else None
        wall = max_committed_prefix(context_len, spec_mode.most_committed(num_steps, window))
        model = (dict(num_kv_heads=heads.num_kv_heads,
                      num_heads=heads.num_kv_heads * draw(st.sampled_from(heads.gqa_ratios)),
                      head_dim=draw(st.sampled_from(heads.head_dims))) if dense
                 else dict(family=family, **dict(shard.fields)))
        most = None if profile.max_batch_tokens is None else profile.max_batch_tokens // bs
        limit = draw(_prefix_limit(wall, profile.prefix_scales, most))
        drawn = dict(
            **model, context_len=context_len, bs=bs,
            prefix_lens=draw(_prefix_lens(bs, limit, page_size, spec_mode.min_prefix_len)),
        )
        if windowed:
            drawn["input_lens"] = window
        if graph:
            capture = draw(_capture_bs(bs, profile))
            drawn["capture_bs"] = [capture]
            if capture > bs:
                drawn["pad_styles"] = [draw(st.sampled_from(PAD_STYLES))]
        if model_window and dense:
            reach = drawn["input_lens"] if windowed else num_steps  # an int: the loader repeats it
            if heads.sliding_windows is None:
                drawn["sliding_window"] = draw(_sliding_window(drawn["prefix_lens"], reach, page_size))
            else:
                drawn.update(draw(_model_window(heads.sliding_windows, context_len, drawn["prefix_lens"], reach,
                                                spec_mode.min_prefix_len, wall)))
        return drawn

    return sizes()


@st.composite
def drawn_cases(draw, profile: DrawProfile) -> DrawnCase:
    """The mode, then a shape, then sizes; sizes are redrawn before the shape, the shape before the mode.

    The caps bind on sizes, so redrawing sizes first keeps expensive kinds of case (graph
    forms, wide trees, many steps) as often drawn as cheap ones, only smaller; redrawing
    within the mode keeps the modes evenly drawn. Hypothesis's shrinker drops the rejected attempts.
    """
    mode = draw(st.sampled_from(tuple(MODES)))
    for _ in range(SHAPE_ATTEMPTS):
        shape = draw(_shape(mode, profile))
        family = family_of_backend(shape["backends"][0])
        if family != DEFAULT_FAMILY and not profile.shards_of(family):
            continue  # the profile draws no shape of that family
        sizes = _sizes(mode, RUNNER_FORMS[shape["runners"][0]].graph, shape["page_size"], shape["num_steps"],
                       profile, model_window=not shape.get("draft_window"), family=family)
        for _ in range(SIZE_ATTEMPTS):
            fields = {**shape, **draw(sizes)}
            if why_not_runnable(mode, fields, profile) is None:
                return DrawnCase(mode, fields)
    reject()
