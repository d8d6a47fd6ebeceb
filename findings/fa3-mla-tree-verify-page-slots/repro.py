"""FA3's absorbed-MLA tree verify reads its draft tokens from the wrong memory at page sizes above 1.

DeepSeek-V3 at TP8 (16 heads a GPU) on --attention-backend fa3 with EAGLE/MTP topk > 1 (a draft
tree) and --page-size 16 or 64. FlashAttentionBackend.forward_extend attends a tree verify in two calls,
the prefix, then the draft tokens through the expand metadata, merged by their LSEs. The expand page
table holds token slots (req_to_token gathered at committed + j, never divided by the page size), so
the dense path views its caches as pages of one token for that call. The absorbed-MLA path passes the
rope and latent caches viewed in pages of page_size: each token slot is read as a page number, another
page's keys, or memory past the pool (an illegal memory access once the slots outnumber the pages).
Two requests (committed 100 and 37), a topk-2 tree of 5 draft tokens, each seeing its lineage, against
a float64 reference; at page 1 the same verify passes.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a Hopper GPU)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (TOLERANCE, MlaPools, MlaShape, Problems, attend_absorbed, chain_verify_batch,  # noqa: E402
                            eagle_args, lineage, mla_layer, model_runner, normal, random_latent, server_state,
                            verdict, worst_error)

import torch  # noqa: E402

COMMITTED, TOPK, STEPS = [100, 37], 2, 2
PARENTS = [-1, 0, 0, 1]  # the verified token, its two children, a child of the first
DRAFT = len(PARENTS)


def tree_verify_error(page: int, generator: torch.Generator) -> float:
    """The largest error of one tree verify at ``page`` against the reference (inf for a NaN output)."""
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    shape = MlaShape(num_heads=16, page_size=page)
    with server_state(attention_backend="fa3", page_size=page, **eagle_args(TOPK, STEPS, DRAFT)) as args:
        pools = MlaPools(shape, [n + DRAFT for n in COMMITTED], args)
        for request, committed in enumerate(COMMITTED):
            random_latent(pools, request, range(committed + DRAFT), generator)
        backend = FlashAttentionBackend(model_runner(shape, pools, args))
        batch = chain_verify_batch(pools, COMMITTED, STEPS, host_mirrors=True, parents=PARENTS, topk=TOPK)
        backend.init_forward_metadata(batch)
        q = normal(generator, len(COMMITTED) * DRAFT, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        rows = torch.cat([pools.keys(r, range(n, n + DRAFT))[0] for r, n in enumerate(COMMITTED)])
        out = attend_absorbed(backend, batch, mla_layer(shape), q, rows.to(shape.dtype), "fa3")
        torch.cuda.synchronize()
        seen = [(r, [*range(n), *(n + token for token in line)]) for r, n in enumerate(COMMITTED)
                for line in lineage(PARENTS)]
        return worst_error(out, q, pools, seen)


def main() -> int:
    generator = torch.Generator().manual_seed(0)
    problems = Problems()
    said = []
    for page in (1, 64):  # an illegal access ends the process: the page that may fault runs last
        try:
            worst = tree_verify_error(page, generator)
        except RuntimeError as error:  # CUDA: an illegal memory access
            problems.add(f"page {page}: the tree verify failed on the GPU: {str(error).splitlines()[0]}")
            break
        said.append(f"page {page}: within {worst:.2g}")
        if not worst <= TOLERANCE[torch.bfloat16]:
            problems.add(f"page {page}: a draft token's output differs from the float64 reference by {worst:.3g} "
                         "(the draft part reads token slots as page numbers)")
    return verdict(problems, "; ".join(said))


if __name__ == "__main__":
    sys.exit(main())
