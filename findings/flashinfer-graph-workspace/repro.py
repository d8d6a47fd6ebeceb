"""The CUDA-graph capture of FlashInfer's verify fails for wide GQA models: FlashInfer 0.6.x sizes its
split-KV scratch per packed (row, head) index, not per query row, and outgrows sglang's fixed workspace.

An EAGLE verify graph for capture size 64, 7 tokens a request (6-step chains), 64 query / 8 KV heads of
256 (a Gemma-class shard at TP1). FlashInferAttnBackend plans the graph's prefill wrapper in the shared
workspace of SGLANG_FLASHINFER_WORKSPACE_SIZE (384 MiB). FlashInfer 0.6.15.post1 (sglang 0.5.17) asks
for batch_prefill_tmp_v of num_qo_heads x padded_batch_size x cta_tile_q x head_dim floats,
GQA-group-size (8x) too much, 499 MB, and the capture raises "Buffer overflow when allocating memory
for batch_prefill_tmp_v". FlashInfer 0.7.1 (flashinfer-ai/flashinfer#5177; sglang 0.5.22 on) sizes it by
query rows, 62 MB, and the capture fits: on sglang 0.5.22+ this prints OK stock.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (Pools, Problems, Shape, chain_verify_batch, eagle_args, model_runner,  # noqa: E402
                            server_state, verdict)

import torch  # noqa: E402

CAPTURE_BS, STEPS = 64, 6
DRAFT = STEPS + 1


def main() -> int:
    import flashinfer
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    shape = Shape(num_heads=64, num_kv_heads=8, head_dim=256, context_len=4096)
    with server_state(attention_backend="flashinfer", page_size=1, **eagle_args(1, STEPS, DRAFT)) as args:
        backend_pools = Pools(shape, [DRAFT + 1] * CAPTURE_BS, args)
        backend = FlashInferAttnBackend(model_runner(shape, backend_pools, args))
        fill = backend.get_cuda_graph_seq_len_fill_value()
        backend.init_cuda_graph_state(CAPTURE_BS, CAPTURE_BS * DRAFT)
        # the verify graph runner's capture batch: every row a padded row of the fill length
        capture = chain_verify_batch(backend_pools, [fill] * CAPTURE_BS, STEPS, host_mirrors=True)
        problems = Problems()
        try:
            backend.init_forward_metadata_out_graph(capture, in_capture=True)
            torch.cuda.synchronize()
        except RuntimeError as error:
            problems.add(f"capturing the verify graph (bs {CAPTURE_BS}, {DRAFT} tokens, {shape.num_heads}/"
                         f"{shape.num_kv_heads} heads of {shape.head_dim}, FlashInfer {flashinfer.__version__}): "
                         f"{str(error).splitlines()[0]}")
        return verdict(problems, f"the verify graph's plan fits the workspace (FlashInfer {flashinfer.__version__})")


if __name__ == "__main__":
    sys.exit(main())
