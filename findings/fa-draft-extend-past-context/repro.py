"""FlashAttentionBackend (FA3 and FA4) bounds a request's keys by the model context; a verify at the
context wall reads the keys past it from the next request's row.

EAGLE chains of 7 steps verify 8 draft tokens. sglang 0.5.22+ runs that verify on a request committed
up to 4096 - 5 + 8 = 4099 tokens (one more on 0.5.17-0.5.21); its draft tokens take row positions
4099..4106, inside the req_to_token row (4096 + 4 + 8 columns). FlashAttentionBackend declares
needs_cpu_seq_lens = False, so on the GPU-only path it gets no seq_lens_cpu, and its eager
init_forward_metadata cuts the page table at max_context_len + 8 = 4104 tokens. Draft tokens 5..7 of
request 0 then read keys 4104..4106 from the page table's next row: request 1's first slots.

Request 0's draft tokens are made to attend almost only to draft tokens 5..7 (their keys are aligned
with the queries), so reading request 1's keys instead moves the output by O(1), not by a rounding.

    python repro.py [fa3|fa4 ...]     # default both; exit 1: the bug shows; exit 0: it does not
Needs a Hopper GPU (FA3, FA4).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (TOLERANCE, Pools, Problems, Shape, attend, chain_verify_batch, forward_kv, eagle_args,  # noqa: E402
                            layer, model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

CONTEXT, STEPS = 4096, 7
DRAFT = STEPS + 1
COMMITTED = [CONTEXT - 5 + DRAFT, 3]  # request 0 at the 0.5.22+ wall; request 1 short, in the next row
FOCUS = 4.0  # query and tail keys scaled so that the tail's scores dwarf every other key's


def run(version: int, problems: Problems) -> str:
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    shape = Shape(num_heads=8, num_kv_heads=2, head_dim=128, context_len=CONTEXT, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(version)
    with server_state(attention_backend=f"fa{version}", page_size=1, **eagle_args(1, STEPS, DRAFT)) as args:
        pools = Pools(shape, [n + DRAFT for n in COMMITTED], args)
        for request, committed in enumerate(COMMITTED):
            random_kv(pools, request, range(committed + DRAFT), generator)
        # request 0: every query of a KV head's group along one direction, draft tokens 5..7's keys along it
        group = shape.num_heads // shape.num_kv_heads
        direction = torch.randn(shape.num_kv_heads, shape.head_dim, generator=generator)
        tail = range(CONTEXT + DRAFT, COMMITTED[0] + DRAFT)  # row positions past the eager page table
        keys, values = pools.keys(0, tail)
        pools.write(0, tail, (FOCUS * direction).expand(len(tail), -1, -1), values)
        q = normal(generator, len(COMMITTED) * DRAFT, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        q[:DRAFT] = (FOCUS * direction).repeat_interleave(group, dim=0).to(q)
        backend = FlashAttentionBackend(model_runner(shape, pools, args), fa_impl_ver=version)
        batch = chain_verify_batch(pools, COMMITTED, STEPS, host_mirrors=False)  # the GPU-only path
        backend.init_forward_metadata(batch)
        table = backend.forward_metadata.page_table
        needed = COMMITTED[0] + DRAFT
        if table.shape[1] * shape.page_size < needed:
            problems.add(f"fa{version}: the eager page table holds {table.shape[1]} tokens per request; request 0 "
                         f"reads {needed} (committed {COMMITTED[0]} + {DRAFT} draft tokens), context {CONTEXT}")
        out = attend(backend, batch, layer(shape), q, *forward_kv(pools, COMMITTED, [DRAFT] * len(COMMITTED)))
        seen = [(r, list(range(n + j + 1))) for r, n in enumerate(COMMITTED) for j in range(DRAFT)]
        worst = worst_error(out, q, pools, seen)
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"fa{version}: output differs from the float64 reference by {worst:.3g} "
                         f"(tolerance {TOLERANCE[shape.dtype]}): request 0's draft tokens 5..7 attend other keys")
        return f"fa{version}: page table {table.shape[1]} >= {needed} tokens, output within {worst:.2g}"


def main(argv: list[str]) -> int:
    problems = Problems()
    ok = [run(int(name.removeprefix("fa")), problems) for name in (argv or ["fa3", "fa4"])]
    return verdict(problems, "; ".join(ok))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
