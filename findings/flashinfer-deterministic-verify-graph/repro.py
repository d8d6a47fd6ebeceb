"""FlashInfer under --enable-deterministic-inference: a target verify replayed from its CUDA graph and the
same verify run eagerly do not give the same bits.

sglang's deterministic inference promises that a request's output does not depend on the batch around it
(FlashInfer with fixed split sizes, and split-KV disabled in CUDA-graph decode: flashinfer_backend.py sets
disable_cuda_graph_kv_split only for decode). The target-verify plan gets neither: eager and graph both call
indices_updater_prefill.update without fixed_split_size or disable_split_kv, and the graph's wrapper plans
for CUDA graphs, so the two kernels split the keys differently. A batch runs as a graph up to the largest
capture size and eagerly above it (or with --disable-cuda-graph), so the same request verifies to other
bits depending on the batch: what deterministic inference exists to rule out.

Five requests (33, 70, 5, 48 and 16 committed tokens), an EAGLE chain of 3 steps (4 draft tokens each),
16 / 2 heads of 64, bf16, page 16; the same batch run eagerly and replayed from a graph captured on it,
compared bitwise. On an H200 through the harness (cases/target_verify.yaml invariant-chain-page16 with
deterministic: true) the replay differed from eager by up to 0.00195 (one bf16 ulp at that size) in 2.8%
of elements; the Triton and FA3 rows of the same case were bitwise equal.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)

Written after the session's GPU time ran out: this script has not been run yet (the harness cells have).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (DEVICE, Pools, Problems, Shape, attend, captured, chain_verify_batch, eagle_args,  # noqa: E402
                            forward_kv, layer, model_runner, normal, random_kv, server_state, verdict)

import torch  # noqa: E402

COMMITTED, STEPS, PAGE = [33, 70, 5, 48, 16], 3, 16


def main() -> int:
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    draft, bs = STEPS + 1, len(COMMITTED)
    shape = Shape(num_heads=16, num_kv_heads=2, head_dim=64, context_len=4096, dtype=torch.bfloat16, page_size=PAGE)
    generator = torch.Generator().manual_seed(0)
    problems = Problems()
    with server_state(attention_backend="flashinfer", page_size=PAGE, enable_deterministic_inference=True,
                      **eagle_args(1, STEPS, draft)) as args:
        pools = Pools(shape, [n + draft for n in COMMITTED], args)
        for request, committed in enumerate(COMMITTED):
            random_kv(pools, request, range(committed + draft), generator)
        backend = FlashInferAttnBackend(model_runner(shape, pools, args))
        assert backend.enable_deterministic, "deterministic inference did not reach the backend"
        batch = chain_verify_batch(pools, COMMITTED, STEPS, host_mirrors=True)
        q = normal(generator, bs * draft, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        k, v = forward_kv(pools, COMMITTED, [draft] * bs)
        verify_layer = layer(shape)

        backend.init_forward_metadata(batch)  # eager, as the worker runs a batch above the capture sizes
        eager = attend(backend, batch, verify_layer, q, k, v)

        backend.init_cuda_graph_state(bs, bs * draft)
        backend.init_forward_metadata_out_graph(batch, in_capture=True)
        graph, replayed = captured(lambda: attend(backend, batch, verify_layer, q, k, v))
        backend.init_forward_metadata_out_graph(batch)
        graph.replay()
        torch.cuda.synchronize()

        differ = (replayed != eager) | replayed.isnan()
        print(f"eager vs graph replay of the same batch: {int(differ.sum())} of {differ.numel()} elements differ, "
              f"by up to {float((replayed - eager).abs().nan_to_num(float('inf')).max()):.3g}", flush=True)
        if differ.any():
            problems.add("under deterministic inference the graph replay and the eager run of one verify batch "
                         "give different bits")
        return verdict(problems, "eager and graph replay bitwise equal")


if __name__ == "__main__":
    sys.exit(main() if DEVICE == "cuda" else 2)
