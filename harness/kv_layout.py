"""Where each request's tokens live: pool rows and KV slots, deliberately untidy.

Backends index the KV pool through ``req_to_token``; a harness that only ever
uses contiguous slots and pool rows 0..bs-1 cannot see indexing bugs that mix
up requests or assume monotonic slots. The default layout shuffles pages and
pool rows; the others are selectable per case.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Slot page 0 is sglang's reserved padding page (CUDA-graph padded rows read it);
# page 1 is ours: never allocated, left poisoned, and every unused req_to_token
# entry points at it, so a backend reading past a request's length reads NaN.
RESERVED_PAGES = 2
POISON_PAGE = 1
SPARE_FRACTION = 0.25


@dataclass(frozen=True)
class KvLayout:
    page_size: int
    pool_slots: int  # KV pool size in tokens (excluding sglang's extra page)
    pool_rows: int  # ReqToTokenPool size (row 0 is sglang's padding row)
    req_pool_indices: list[int]
    row_slots: list[list[int]]  # per request: slot of row position 0..len-1

    @property
    def poison_slot(self) -> int:
        return POISON_PAGE * self.page_size


def _page_order(style: str, pages_per_req: list[int], spare: int, gen: torch.Generator) -> list[list[int]]:
    """Assign page ids (>= RESERVED_PAGES) to requests following ``style``."""
    total = sum(pages_per_req)
    ids = list(range(RESERVED_PAGES, RESERVED_PAGES + total + spare))
    if style == "shuffled":
        perm = torch.randperm(len(ids), generator=gen).tolist()
        ids = [ids[i] for i in perm]
    if style == "interleaved":
        assigned: list[list[int]] = [[] for _ in pages_per_req]
        cursor = iter(ids)
        for round_ in range(max(pages_per_req, default=0)):
            for req, need in enumerate(pages_per_req):
                if round_ < need:
                    assigned[req].append(next(cursor))
        return assigned
    assigned, start = [], 0
    for need in pages_per_req:
        chunk = ids[start:start + need]
        assigned.append(chunk[::-1] if style == "non_monotonic" else chunk)
        start += need
    return assigned


def build_layout(style: str, row_lens: list[int], page_size: int, seed: int,
                 extra_rows: int = 0) -> KvLayout:
    """Place ``row_lens[r]`` tokens for each request r.

    ``extra_rows`` reserves more pool rows than requests, so pool indices are
    sparse and CUDA-graph padding has room.
    """
    gen = torch.Generator().manual_seed(seed)
    pages_per_req = [-(-n // page_size) for n in row_lens]
    spare = max(1, int(sum(pages_per_req) * SPARE_FRACTION))
    pages = _page_order(style, pages_per_req, spare, gen)
    row_slots = [
        [pages[r][t // page_size] * page_size + t % page_size for t in range(n)]
        for r, n in enumerate(row_lens)
    ]
    bs = len(row_lens)
    pool_rows = 2 * bs + extra_rows + 1
    if style in ("shuffled", "non_monotonic"):
        rows = (torch.randperm(pool_rows - 1, generator=gen) + 1)[:bs].tolist()
        if rows == list(range(1, bs + 1)):  # the draw came out tidy: make it untidy on purpose
            rows = list(range(bs + 1, 1, -1))
    else:
        rows = list(range(1, bs + 1))
    total_pages = RESERVED_PAGES + sum(pages_per_req) + spare
    return KvLayout(page_size, total_pages * page_size, pool_rows, rows, row_slots)
