"""Real sglang pools, filled and poisoned, plus the harness's own copy of the KV, and the Q/K/V each
forward writes into them (drawn once, shared by the backend and the reference).

Everything a backend could read that no request owns is NaN: unused KV slots,
and req_to_token entries past a request's length (they point at a poisoned
slot). A backend that reads the wrong memory therefore produces NaN, which the
comparison reports, instead of plausible numbers.

Where each request's tokens live (SlotLayout: pool rows and KV slots) is deliberately untidy.
Backends index the KV pool through ``req_to_token``; a harness that only ever uses contiguous
slots and pool rows 0..bs-1 cannot see indexing bugs that mix up requests or assume monotonic
slots. The default layout shuffles pages and pool rows; the others are selectable per case.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch

from harness.case_spec import CaseSpec
from harness.compare import census_heads, census_slice
from harness.reference import census_parts, reference_attention
from harness.releases import since
from harness.transfers import to_device_together

if TYPE_CHECKING:
    from harness.modes.base import ForwardStep

# Slot page 0 is sglang's reserved padding page (CUDA-graph padded rows read it);
# page 1 is ours: never allocated, left poisoned, and every unused req_to_token
# entry points at it, so a backend reading past a request's length reads NaN.
RESERVED_PAGES = 2
POISON_PAGE = 1
SPARE_FRACTION = 0.25


@dataclass(frozen=True)
class SlotLayout:
    page_size: int
    pool_slots: int  # KV pool size in tokens (excluding sglang's extra page)
    pool_rows: int  # ReqToTokenPool size (row 0 is sglang's padding row)
    req_pool_indices: list[int]
    row_slots: list[torch.Tensor]  # per request: int64 slot of row position 0..len-1 (host)

    @property
    def poison_slot(self) -> int:
        return POISON_PAGE * self.page_size

    def slots_at(self, writes: list[tuple[int, int]]) -> torch.Tensor:
        """int64 slots of (request, row position) pairs, in order: one gather per request."""
        found = torch.empty(len(writes), dtype=torch.int64)
        for request, (indices, positions) in by_request(writes).items():
            found[indices] = self.row_slots[request][positions]
        return found


def by_request(writes: list[tuple[int, int]]) -> dict[int, tuple[list[int], list[int]]]:
    """(request, row position) pairs grouped per request: request -> (their indices, their positions),
    so one indexed operation serves all of a request's pairs."""
    grouped: dict[int, tuple[list[int], list[int]]] = {}
    for index, (request, position) in enumerate(writes):
        indices, positions = grouped.setdefault(request, ([], []))
        indices.append(index)
        positions.append(position)
    return grouped


def _page_order(style: str, pages_per_req: list[int], spare: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Assign page ids (>= RESERVED_PAGES) to requests following ``style``."""
    total = sum(pages_per_req)
    ids = torch.arange(RESERVED_PAGES, RESERVED_PAGES + total + spare)
    if style == "shuffled":
        ids = ids[torch.randperm(len(ids), generator=gen)]
    if style == "interleaved":  # round j hands each request that still needs one its j-th page
        need = torch.tensor(pages_per_req, dtype=torch.long)
        request = torch.repeat_interleave(torch.arange(len(need)), need)
        round_ = torch.arange(total) - torch.repeat_interleave(torch.cumsum(need, 0) - need, need)
        handed_out = torch.argsort(round_ * len(need) + request)  # k-th page handed out -> (request, round)
        rank = torch.empty_like(handed_out)
        rank[handed_out] = torch.arange(total)
        return list(ids[rank].split(pages_per_req))
    chunks = ids[:total].split(pages_per_req)
    return [chunk.flip(0) if style == "non_monotonic" else chunk for chunk in chunks]


def build_layout(style: str, row_lens: list[int], page_size: int, seed: int,
                 extra_rows: int = 0) -> SlotLayout:
    """Place ``row_lens[r]`` tokens for each request r.

    ``extra_rows`` reserves more pool rows than requests, so pool indices are
    sparse and CUDA-graph padding has room.
    """
    gen = torch.Generator().manual_seed(seed)
    pages_per_req = [-(-n // page_size) for n in row_lens]
    spare = max(1, int(sum(pages_per_req) * SPARE_FRACTION))
    pages = _page_order(style, pages_per_req, spare, gen)
    row_slots = []
    for request_pages, n in zip(pages, row_lens):
        position = torch.arange(n)
        row_slots.append(request_pages[position // page_size] * page_size + position % page_size)
    bs = len(row_lens)
    pool_rows = 2 * bs + extra_rows + 1
    if style in ("shuffled", "non_monotonic"):
        rows = (torch.randperm(pool_rows - 1, generator=gen) + 1)[:bs].tolist()
        if rows == list(range(1, bs + 1)):  # the draw came out tidy: make it untidy on purpose
            rows = list(range(bs + 1, 1, -1))
    else:
        rows = list(range(1, bs + 1))
    total_pages = RESERVED_PAGES + sum(pages_per_req) + spare
    return SlotLayout(page_size, total_pages * page_size, pool_rows, rows, row_slots)


def _headroom_from_server_args(server_args) -> int:
    from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len

    return get_req_to_token_extra_context_len(server_args)


def _headroom_from_context(server_args) -> int:
    """0.5.18+: sglang reads the speculative settings from its runtime context."""
    from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len

    return get_req_to_token_extra_context_len()


# kv_cache_configurator._build_req_to_token_pool asks this for each req_to_token row's headroom
# over the model's context length (the formula is the same for EAGLE in 0.5.17-0.5.23; its call changed).
_REQ_TO_TOKEN_HEADROOM = since({"0.5.17": _headroom_from_server_args, "0.5.18": _headroom_from_context})


def req_to_token_width(spec: CaseSpec, server_args) -> int:
    """Columns of a req_to_token row, as sglang's model runner sizes the pool: context + its headroom.

    Asked from sglang inside its server-args state (harness/sglang_env.py sglang_state), never mirrored.
    """
    return spec.model_context_len + _REQ_TO_TOKEN_HEADROOM.value(server_args)


@dataclass
class BatchState:
    """Pools as a backend sees them, and the truth the reference uses (on the same device)."""

    spec: CaseSpec
    layout: SlotLayout
    device: str
    pools: SimpleNamespace
    row_k: list[torch.Tensor]  # per request [row_len, kv_heads, head_dim], NaN where unwritten
    row_v: list[torch.Tensor]
    gen: torch.Generator = field(repr=False)  # draw_generator's

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.spec.dtype)

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, device=self.gen.device).to(self.dtype).to(self.device)

    def tensor(self, values, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def record_new_kv(self, writes: list[tuple[int, int]], k: torch.Tensor, v: torch.Tensor) -> None:
        """Note in the harness copy the K/V this forward hands the backend to store."""
        groups = by_request(writes)
        # every request's rows and positions in one copy to the device, sliced per request there
        moved = to_device_together(self.device, *(torch.tensor(part, dtype=torch.int64)
                                                  for pair in groups.values() for part in pair))
        for request, rows, positions in zip(groups, moved[0::2], moved[1::2]):
            self.row_k[request][positions] = k[rows]
            self.row_v[request][positions] = v[rows]

    def copy_kv(self, request: int, targets: list[int], sources: list[int]) -> None:
        """Copy one request's K/V from row positions ``sources`` to ``targets``, in the pool and in
        the harness copy alike: a KV move the worker makes before a forward (harness/modes)."""
        if not targets:
            return
        slots = self.layout.row_slots[request]
        into, out_of = slots[targets].to(self.device), slots[sources].to(self.device)
        for buffer in (self.pools.kv.k_buffer[0], self.pools.kv.v_buffer[0]):
            buffer[into] = buffer[out_of]
        for row in (self.row_k[request], self.row_v[request]):
            row[targets] = row[sources]


# Where a cell's random values are drawn: "device" (default) or "host" (pytest --draws).
DRAWS_ENV = "ATTN_HARNESS_DRAWS"
DRAW_PLACES = ("device", "host")


def draw_generator(device: str, seed: int) -> torch.Generator:
    """The case's random stream: on the device its tensors live on, or on the host.

    Drawing where the tensors live keeps production-sized K/V (gigabytes) off the host's one
    random-number thread (about 200 M values/s). On a CPU both places are the same stream, the one
    every earlier version of the harness drew. On a GPU, device draws are the GPU's own stream;
    ``--draws host`` draws on the host instead, slower but bit-identical to a CPU run of the same
    cell, so a GPU failure can be replayed value for value on a CPU, and GPU runs compare with runs
    made before draws moved to the device.
    """
    place = os.environ.get(DRAWS_ENV, "device")
    return torch.Generator(device=device if place == "device" else "cpu").manual_seed(seed)


def build_state(spec: CaseSpec, layout: SlotLayout, row_lens: list[int], device: str, server_args) -> BatchState:
    """Called inside sglang_state: the req_to_token width is sglang's answer for these server args."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    dtype = getattr(torch, spec.dtype)
    context_len = spec.model_context_len
    req_to_token = ReqToTokenPool(size=layout.pool_rows - 1, max_context_len=req_to_token_width(spec, server_args),
                                  device=device, enable_memory_saver=False)
    kv = MHATokenToKVPool(size=layout.pool_slots, page_size=spec.page_size, dtype=dtype,
                          head_num=spec.num_kv_heads, head_dim=spec.head_dim, layer_num=1,
                          device=device, enable_memory_saver=False)
    req_to_token.req_to_token[1:] = layout.poison_slot
    for request, row in enumerate(layout.req_pool_indices):
        slots = layout.row_slots[request]
        req_to_token.req_to_token[row, : len(slots)] = slots.to(device, torch.int32)

    k_buffer, v_buffer = kv.k_buffer[0], kv.v_buffer[0]
    k_buffer.fill_(float("nan"))
    v_buffer.fill_(float("nan"))
    k_buffer[: spec.page_size] = 0  # sglang's padding page: padded rows read it
    v_buffer[: spec.page_size] = 0

    shape = (spec.num_kv_heads, spec.head_dim)
    row_k = [torch.full((n, *shape), float("nan"), dtype=dtype, device=device) for n in row_lens]
    row_v = [torch.full((n, *shape), float("nan"), dtype=dtype, device=device) for n in row_lens]
    state = BatchState(spec, layout, device, SimpleNamespace(req_to_token=req_to_token, kv=kv,
                                                             context_len=context_len),
                       row_k, row_v, draw_generator(device, spec.seed))
    for request, prefix in enumerate(spec.prefix_lens):
        k, v = state.randn(prefix, *shape), state.randn(prefix, *shape)
        row_k[request][:prefix], row_v[request][:prefix] = k, v
        slots = layout.row_slots[request][:prefix].to(device)
        k_buffer[slots] = k
        v_buffer[slots] = v
    return state


# --- the inputs of each forward --------------------------------------------------------------

@dataclass
class StepInputs:
    q: torch.Tensor  # [tokens, heads * head_dim] on the device
    k: torch.Tensor | None  # [tokens, kv_heads, head_dim]; None for a forward that writes no KV
    v: torch.Tensor | None
    expected: torch.Tensor  # float64 [tokens, heads, head_dim], on the device
    census: dict[str, torch.Tensor]  # the key-census head's part magnitudes per split the cell's backend uses

    def poisoned_output(self) -> torch.Tensor:
        """Output buffer handed to backends that accept one: NaN until written."""
        return torch.full_like(self.q, float("nan"))


def draw_inputs(state: BatchState, steps: list[ForwardStep], scale: float,
                census_splits: tuple[str, ...] = ()) -> list[StepInputs]:
    """Draw every step's Q/K/V and compute the reference, in step order.

    Q is random except in the key-census head (harness/compare.py), where it is 0.
    ``census_splits``: the ways the cell's backend parts a query's keys into merged partial outputs
    (backends.PartialMerge); their census magnitudes are computed here, and none for a backend
    that merges nothing.

    Later draft-decode steps see K/V written by earlier ones, so the harness
    copy of each row is updated step by step before that step's reference. A forward that
    writes nothing (frozen-KV MTP's draft reads the target's KV only) gets no K/V: sglang's
    model hands its backend k = v = None with save_kv_cache=False.
    """
    spec = state.spec
    drawn = []
    for step in steps:
        tokens = len(step.queries)
        q = state.randn(tokens, spec.num_heads, spec.head_dim)
        q[:, census_slice(spec.num_heads)] = 0
        k = v = None
        if step.writes:
            k = state.randn(tokens, spec.num_kv_heads, spec.head_dim)
            v = state.randn(tokens, spec.num_kv_heads, spec.head_dim)
            state.record_new_kv(step.writes, k, v)
        expected = reference_attention(q, step.queries, state.row_k, state.row_v, scale)
        census = (census_parts(step.queries, spec.prefix_lens, state.row_k, state.row_v, spec.num_kv_heads - 1,
                               spec.page_size, census_splits) if census_splits and census_heads(spec.num_heads) else {})
        drawn.append(StepInputs(q.reshape(tokens, -1), k, v, expected, census))
    return drawn
