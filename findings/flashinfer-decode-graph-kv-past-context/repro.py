"""FlashInfer's CUDA-graph decode kv_indices hold max_num_tokens x max_context_len; a decode row at the
context wall under speculative decoding writes past them, unchecked.

A frozen-KV MTP draft decodes over the target's KV (a plain DECODE, one row per request for topk 1)
on the committed prefix. With 6-step drafts (7 draft tokens) sglang 0.5.22+ runs it on requests
committed up to 4096 - 5 + 7 = 4098 tokens for a model of 4096. FlashInferAttnBackend.init_cuda_graph_state
sizes the decode graph's kv_indices as max_num_tokens x max_context_len = 4096 for one row, and the
replay's index build writes 4098: 2 int32 past the buffer. The buffer here is followed by a canary
(sglang's own buffer, kept, viewed out of a larger allocation), so the write past it shows.

    python repro.py          # exit 1: the bug shows; exit 0: it does not (needs a GPU: FlashInfer)
"""

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sglang_standin import (DEVICE, TOLERANCE, Pools, Problems, Shape, attend, eagle_args, layer,  # noqa: E402
                            model_runner, normal, random_kv, server_state, verdict, worst_error)

import torch  # noqa: E402

CONTEXT, STEPS = 4096, 6
COMMITTED = CONTEXT - 5 + (STEPS + 1)
CANARY, CANARY_LEN = -7, 64


def main() -> int:
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPDraftInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    shape = Shape(num_heads=8, num_kv_heads=8, head_dim=128, context_len=CONTEXT)
    generator = torch.Generator().manual_seed(0)
    with server_state(attention_backend="flashinfer", page_size=1,
                      **eagle_args(1, STEPS, STEPS + 1, "FROZEN_KV_MTP")) as args:
        pools = Pools(shape, [COMMITTED], args)
        random_kv(pools, 0, range(COMMITTED), generator)
        backend = FlashInferAttnBackend(model_runner(shape, pools, args, draft_worker=True,
                                                     algorithm="FROZEN_KV_MTP"))
        backend.init_cuda_graph_state(1, 1)  # one request, one token each
        buffer = backend.cuda_graph_kv_indices[0]
        guarded = torch.full((buffer.numel() + CANARY_LEN,), CANARY, dtype=buffer.dtype, device=DEVICE)
        guarded[: buffer.numel()] = buffer
        backend.cuda_graph_kv_indices[0] = guarded[: buffer.numel()]
        fill = backend.get_cuda_graph_seq_len_fill_value()

        def decode(lengths: list[int], rows: list[int]):
            return ForwardBatch(
                forward_mode=ForwardMode.DECODE, batch_size=1,
                input_ids=torch.zeros(1, dtype=torch.int64, device=DEVICE), req_pool_indices=pools.tensor(rows),
                seq_lens=pools.tensor(lengths), out_cache_loc=None, seq_lens_sum=sum(lengths),
                seq_lens_cpu=torch.tensor(lengths), positions=pools.tensor([n - 1 for n in lengths]),
                spec_info=None, spec_algorithm=SpeculativeAlgorithm.from_string("FROZEN_KV_MTP"))

        static = decode([fill], [0])  # the graph runner's capture batch: padded rows only
        backend.init_forward_metadata_out_graph(static, in_capture=True)
        real = decode([COMMITTED], pools.req_pool_indices[:1])
        for name in ("seq_lens", "req_pool_indices", "positions"):  # the runner's copy before a replay
            getattr(static, name).copy_(getattr(real, name))
        static.seq_lens_cpu, static.seq_lens_sum = real.seq_lens_cpu, real.seq_lens_sum
        backend.init_forward_metadata_out_graph(static)
        torch.cuda.synchronize()
        past = int((guarded[buffer.numel():] != CANARY).sum())
        problems = Problems()
        if past:
            problems.add(f"the decode graph's kv_indices hold {buffer.numel()} (max_num_tokens 1 x max_context_len "
                         f"{CONTEXT}); a replay at committed {COMMITTED} wrote {past} entries past them")
        view = copy.copy(static)
        view.spec_info = FrozenKVMTPDraftInput(capture_hidden_mode=CaptureHiddenMode.LAST, num_tokens_per_req=1,
                                               num_tokens_for_logprob_per_req=1)
        q = normal(generator, 1, shape.num_heads, shape.head_dim, dtype=shape.dtype)
        out = attend(backend, view, layer(shape), q, None, None)
        worst = worst_error(out, q, pools, [(0, list(range(COMMITTED)))])
        if not worst <= TOLERANCE[shape.dtype]:
            problems.add(f"the draft's decode differs from the float64 reference by {worst:.3g}")
        return verdict(problems, f"kv_indices hold the row ({buffer.numel()} >= {COMMITTED}); decode within {worst:.2g}")


if __name__ == "__main__":
    sys.exit(main())
