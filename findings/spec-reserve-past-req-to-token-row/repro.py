"""At page size 1 an EAGLE tree's decode reservation outgrows the req_to_token row near the context, and
the row write lands in the next request's row.

Every decode step of speculative decoding v2 reserves KV for the step in flight and the next
(eagle_utils.eagle_prepare_for_decode): the row grows to committed + get_alloc_reserve_per_decode(),
2 x max(topk x num_steps, num_draft_tokens), and assign_req_to_token_pool writes the new slots into
req_to_token[row, cur:nxt] with no bound. sglang widens each row by that reserve only at page size > 1
(mem_cache/allocation_sizing.get_req_to_token_extra_context_len); at page size 1 the row is
context_len + 4 + num_draft_tokens. For a tree of topk 4, 3 steps, 8 draft tokens that is 12 columns
of headroom against a reserve of 24: a request whose prompt plus max_new_tokens runs to the context
(the scheduler clamps max_new_tokens to context_len - 2 - prompt) is reserved up to 7 columns past its
row, and the slots it was given overwrite the first 7 entries of the next pool row: another request's
first KV slots. (The eagle_utils assert that would stop it checks only page > 1 with topk > 1.)

The reproducer asks sglang for each number: the row width as its model runner sizes the pool, the
reserve, the page-aligned lengths (page_aligned_decode_alloc_lens), and runs sglang's own write
(assign_req_to_token_pool) on a ReqToTokenPool of two requests, the first at the longest committed
length a decode batch is built on (context - 4; context - 5 under the default overlap scheduler).

    python repro.py          # exit 1: the bug shows; exit 0: it does not
CPU (the write is a Triton kernel, run by Triton's interpreter) or GPU; a few seconds.
"""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import DEVICE, Problems, eagle_args, row_headroom, server_state, verdict  # noqa: E402

import torch  # noqa: E402

CONTEXT = 4096
TREES = [(4, 3, 8), (1, 3, 4)]  # (topk, num_steps, num_draft_tokens): a tree that outgrows the row, a chain that fits
COMMITTED = CONTEXT - 4  # max_req_len - 3: n = max_new_tokens - 1 outputs, n - 1 of them in the KV
NEIGHBOUR = 777_777  # what the next request's row holds, before and (if the bug is absent) after


def reserved_len(committed: int, allocated: int, reserve: int) -> int:
    """The row length eagle_prepare_for_decode reserves: sglang's page_aligned_decode_alloc_lens where the
    release has it (0.5.19+), else its rule, max(allocated, committed + reserve) at page size 1."""
    try:
        from sglang.srt.mem_cache.allocation_sizing import page_aligned_decode_alloc_lens
    except ImportError:
        return max(allocated, committed + reserve)
    request = SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=allocated, kv_committed_len=committed))
    return page_aligned_decode_alloc_lens([request], reserve=reserve, page_size=1)[1][0]


def reserve_per_decode(server_args) -> int:
    from sglang.srt.mem_cache.allocation_sizing import get_alloc_reserve_per_decode

    try:
        return get_alloc_reserve_per_decode()
    except TypeError:  # 0.5.17-0.5.18 take the server args
        return get_alloc_reserve_per_decode(server_args)


def run(topk: int, steps: int, draft: int, problems: Problems) -> str:
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool_func
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    with server_state(attention_backend="triton", page_size=1, **eagle_args(topk, steps, draft)) as args:
        width = CONTEXT + row_headroom(args)
        reserve = reserve_per_decode(args)
        pool = ReqToTokenPool(size=3, max_context_len=width, device=DEVICE, enable_memory_saver=False)
        table = pool.req_to_token
        table[2] = NEIGHBOUR  # request B's row, right after request A's
        allocated = COMMITTED + 1  # what the last step left A holding (any value below the new length)
        new_len = reserved_len(COMMITTED, allocated, reserve)
        slots = torch.arange(1, new_len - allocated + 1, dtype=torch.int64, device=DEVICE)
        assign_req_to_token_pool_func(torch.tensor([1], device=DEVICE), table, torch.tensor([allocated], device=DEVICE),
                                      torch.tensor([new_len], device=DEVICE), slots, 1)
        overwritten = int((table[2] != NEIGHBOUR).sum())
        shape = f"topk {topk}, {steps} steps, {draft} draft tokens"
        if overwritten:
            problems.add(f"{shape}: request A (committed {COMMITTED}, context {CONTEXT}) is reserved up to {new_len} "
                         f"columns (reserve {reserve}); its row holds {width}: the write put {overwritten} of its "
                         f"slots into the first columns of request B's row")
        return f"{shape}: reserved {new_len} <= row {width}"


def main() -> int:
    problems = Problems()
    ok = [run(*tree, problems) for tree in TREES]
    return verdict(problems, "; ".join(ok))


if __name__ == "__main__":
    sys.exit(main())
