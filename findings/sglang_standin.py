"""What every reproducer in findings/ builds sglang's attention backends on, without attn-harness.

sglang, torch and the kernel library only. A backend reads its server arguments and parallel
topology through sglang's process-wide getters, and a handful of attributes off its model runner;
a reproducer needs no model, no scheduler and no distributed set-up, only:

- ``server_state``: sglang's own override of the server arguments, on a single rank;
- ``model_runner``: the attributes a backend reads, as plain data, with sglang's own ModelRunner
  methods bound where a release reads them (found by feature, so one file serves 0.5.17 to 0.5.23);
- ``Pools``: a ReqToTokenPool as wide as sglang's model runner makes it (context plus sglang's
  speculative headroom) and an MHATokenToKVPool, with chosen KV slots for each request;
- ``reference``: attention in float64 from the keys each query should see.

Each ``<finding>/repro.py`` puts this folder on ``sys.path`` and imports it; ``python -m harness
findings bundle <finding>`` writes a reproducer and this file as one script for an upstream issue.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from dataclasses import dataclass, field
from types import MethodType, SimpleNamespace

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":  # sglang's Triton kernels then run under Triton's interpreter (set before triton loads)
    os.environ.setdefault("TRITON_INTERPRET", "1")

SINGLE_RANK = dict(tp_size=1, tp_rank=0, attn_tp_size=1, attn_tp_rank=0, attn_dcp_size=1, attn_dcp_rank=0,
                   dcp_size=1, dcp_rank=0, attn_cp_size=1, attn_cp_rank=0, attn_dp_size=1, attn_dp_rank=0)


@contextlib.contextmanager
def server_state(**fields):
    """sglang's server arguments overridden with ``fields``, on one rank; yields the ServerArgs."""
    from sglang.srt.runtime_context import get_context, get_parallel

    override = get_context().override_server_args(
        **dict(disable_cuda_graph=True, chunked_prefill_size=-1, kv_cache_dtype="auto",
               triton_attention_num_kv_splits=8), **fields)
    server_args = override.install()
    try:
        with get_parallel().override(**SINGLE_RANK):
            yield server_args
    finally:
        override.restore()


def eagle_args(topk: int, num_steps: int, num_draft_tokens: int, algorithm: str = "EAGLE") -> dict:
    """The --speculative-* arguments of an EAGLE deployment."""
    return dict(speculative_algorithm=algorithm, speculative_eagle_topk=topk, speculative_num_steps=num_steps,
                speculative_num_draft_tokens=num_draft_tokens)


def row_headroom(server_args) -> int:
    """Columns sglang's model runner gives a req_to_token row past the model context
    (mem_cache/allocation_sizing.get_req_to_token_extra_context_len; its argument went away in 0.5.18)."""
    from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len

    try:
        return get_req_to_token_extra_context_len()
    except TypeError:
        return get_req_to_token_extra_context_len(server_args)


@dataclass(frozen=True)
class Shape:
    """The attention layer's shape and the model's context length."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    context_len: int
    dtype: torch.dtype = torch.bfloat16
    page_size: int = 1
    sliding_window: int | None = None  # RadixAttention's sliding_window_size (the HF window - 1)

    @property
    def scale(self) -> float:
        return self.head_dim ** -0.5

    use_mla = False

    def model_config(self) -> SimpleNamespace:
        """What backends read off sglang's ModelConfig: a Llama-architecture layer of these heads."""
        import transformers
        from sglang.srt.configs.model_config import AttentionArch

        hf = transformers.LlamaConfig(num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
                                      hidden_size=self.num_heads * self.head_dim, head_dim=self.head_dim,
                                      num_hidden_layers=1, max_position_embeddings=self.context_len,
                                      architectures=["LlamaForCausalLM"])
        return _config(self, hf, attention_arch=AttentionArch.MHA, head_dim=self.head_dim, v_head_dim=self.head_dim)


@dataclass(frozen=True)
class MlaShape:
    """An absorbed MLA layer (DeepSeek-V3's by default, at TP8: 16 of its 128 heads) over sglang's
    latent cache: one cached head of kv_lora_rank + qk_rope_head_dim per token; V is the latent.
    The scale is DeepSeek-V3's: (qk_nope + qk_rope) ** -0.5 times YaRN's mscale squared
    (factor 40, mscale_all_dim 1: (0.1 ln 40 + 1) ** 2)."""

    num_heads: int = 16
    context_len: int = 4096
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    dtype: torch.dtype = torch.bfloat16
    page_size: int = 1
    scale: float = 192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2
    num_kv_heads = 1
    sliding_window = None
    use_mla = True

    @property
    def head_dim(self) -> int:
        """The cached row's width: what q and K carry per head (the latent, then the rope key)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def model_config(self) -> SimpleNamespace:
        """A DeepSeek-V3-architecture config; num_key_value_heads is the query heads' count, as
        DeepSeek's config.json gives it, and head_dim sglang's placeholder 256 for DeepSeek models."""
        import transformers
        from sglang.srt.configs.model_config import AttentionArch

        hf = transformers.DeepseekV3Config(
            num_attention_heads=self.num_heads, num_key_value_heads=self.num_heads, kv_lora_rank=self.kv_lora_rank,
            qk_nope_head_dim=self.qk_nope_head_dim, qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim, num_hidden_layers=1, max_position_embeddings=self.context_len,
            architectures=["DeepseekV3ForCausalLM"])
        return _config(self, hf, attention_arch=AttentionArch.MLA, kv_lora_rank=self.kv_lora_rank,
                       qk_nope_head_dim=self.qk_nope_head_dim, qk_rope_head_dim=self.qk_rope_head_dim,
                       v_head_dim=self.v_head_dim, head_dim=256, scaling=self.scale)


def _config(shape, hf, **arch_fields) -> SimpleNamespace:
    """The ModelConfig fields every layer shares, plus the architecture's own."""
    return SimpleNamespace(
        get_max_num_attention_heads=lambda: shape.num_heads,
        get_num_kv_heads=lambda tp_size, dcp_size=1: hf.num_key_value_heads,
        num_attention_heads=shape.num_heads, num_key_value_heads=hf.num_key_value_heads, swa_v_head_dim=None,
        context_len=shape.context_len, is_encoder_decoder=False, is_multimodal=False,
        is_local_attention_model=False, is_hybrid_swa=False, hf_config=hf, hf_text_config=hf,
        linear_attn_registry_result=None, num_hidden_layers=1, dtype=shape.dtype, **arch_fields)


def model_runner(shape: Shape | MlaShape, pools: "Pools", server_args, *, draft_worker: bool = False,
                 algorithm: str | None = "EAGLE"):
    """The model runner a backend is built from: what backends read, nothing else."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    config = shape.model_config()
    runner = SimpleNamespace(
        req_to_token_pool=pools.req_to_token, token_to_kv_pool=pools.kv,
        token_to_kv_pool_allocator=SimpleNamespace(page_size=shape.page_size, get_kvcache=lambda: pools.kv),
        sliding_window_size=shape.sliding_window, page_size=shape.page_size, model_config=config,
        device=DEVICE, gpu_id=0, server_args=server_args, is_draft_worker=draft_worker,
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm), kv_cache_dtype=shape.dtype,
        kv_cache_dtype_str="auto", dtype=shape.dtype, is_hybrid_swa=False, attention_chunk_size=None,
        use_mla_backend=shape.use_mla, init_new_workspace=False, plan_stream_for_flashinfer=None,
        canary_manager=None, attn_cp_size=1, prefill_attention_backend_str=server_args.attention_backend,
        decode_attention_backend_str=server_args.attention_backend)
    with contextlib.suppress(ImportError):  # up to 0.5.20 backends read the topology off model_runner.ps
        from sglang.srt.distributed.parallel_state_wrapper import ParallelState

        runner.ps = ParallelState.trivial()
    if hasattr(ModelRunner, "init_kv_index_translator"):  # 0.5.19+
        ModelRunner.init_kv_index_translator(runner)
    if hasattr(ModelRunner, "decode_num_tokens_per_req"):  # 0.5.21+
        runner.decode_num_tokens_per_req = MethodType(ModelRunner.decode_num_tokens_per_req, runner)
    return runner


@dataclass
class Pools:
    """sglang's pools with every request's row: request r's row position p lives at KV slot
    ``rows[r][p]``. Unwritten KV is NaN, so a backend reading memory no request owns shows it."""

    shape: Shape
    row_lens: list[int]
    server_args: object
    spare_rows: int = 4
    req_to_token: object = field(init=False)
    kv: object = field(init=False)
    rows: list[torch.Tensor] = field(init=False)
    req_pool_indices: list[int] = field(init=False)
    truth: list[tuple[torch.Tensor, torch.Tensor]] = field(init=False)  # what each row should hold (float64)

    def __post_init__(self):
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

        page = self.shape.page_size
        pages = [-(-n // page) for n in self.row_lens]
        # page 0 is sglang's padding page; request r takes the next pages, in order
        first = torch.tensor([0, *pages]).cumsum(0)[:-1] + 1
        self.rows = [(first[r] * page + torch.arange(n)).to(torch.int64) for r, n in enumerate(self.row_lens)]
        width = self.shape.context_len + row_headroom(self.server_args)
        self.req_to_token = ReqToTokenPool(size=len(self.row_lens) + self.spare_rows, max_context_len=width,
                                           device=DEVICE, enable_memory_saver=False)
        self.kv = self.kv_pool((sum(pages) + 2) * page)
        self.req_pool_indices = list(range(1, len(self.row_lens) + 1))
        for request, row in zip(self.req_pool_indices, self.rows):
            self.req_to_token.req_to_token[request, : len(row)] = row.to(DEVICE, torch.int32)
        for buffer in self.kv_buffers():
            buffer.fill_(float("nan"))
            buffer[:page] = 0
        self.truth = [tuple(torch.full((n, self.shape.num_kv_heads, width),
                                       float("nan"), dtype=torch.float64, device=DEVICE)
                            for width in self.truth_widths()) for n in self.row_lens]

    def kv_pool(self, size: int):
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        return MHATokenToKVPool(size=size, page_size=self.shape.page_size, dtype=self.shape.dtype,
                                head_num=self.shape.num_kv_heads, head_dim=self.shape.head_dim, layer_num=1,
                                device=DEVICE, enable_memory_saver=False)

    def kv_buffers(self) -> tuple[torch.Tensor, ...]:
        return self.kv.k_buffer[0], self.kv.v_buffer[0]

    def truth_widths(self) -> tuple[int, int]:
        """Per head, the widths of K and V a row position holds."""
        return self.shape.head_dim, self.shape.head_dim

    def store(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.kv.k_buffer[0][slots], self.kv.v_buffer[0][slots] = k, v

    @property
    def row_width(self) -> int:
        return self.req_to_token.req_to_token.shape[1]

    def write(self, request: int, positions: range, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store K/V of row positions ``positions`` of ``request`` in the KV pool, and note them as
        what the row holds (what the reference reads)."""
        k, v = k.to(DEVICE, self.shape.dtype), v.to(DEVICE, self.shape.dtype)
        self.store(self.slots(request, positions), k, v)
        true_k, true_v = self.truth[request]
        true_k[list(positions)], true_v[list(positions)] = k.double(), v.double()

    def keys(self, request: int, positions) -> tuple[torch.Tensor, torch.Tensor]:
        """The K/V row positions ``positions`` of ``request`` should hold (float64)."""
        true_k, true_v = self.truth[request]
        return true_k[list(positions)], true_v[list(positions)]

    def slots(self, request: int, positions) -> torch.Tensor:
        return self.rows[request][list(positions)].to(DEVICE)

    def tensor(self, values, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=DEVICE)


class MlaPools(Pools):
    """The same rows over sglang's MLATokenToKVPool: one cached row per token (the latent, then the
    rope key). K is that row, V its latent part, the model's absorbed attention."""

    def kv_pool(self, size: int):
        from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

        return MLATokenToKVPool(size=size, page_size=self.shape.page_size, dtype=self.shape.dtype,
                                kv_lora_rank=self.shape.kv_lora_rank, qk_rope_head_dim=self.shape.qk_rope_head_dim,
                                layer_num=1, device=DEVICE, enable_memory_saver=False)

    def kv_buffers(self) -> tuple[torch.Tensor, ...]:
        return (self.kv.kv_buffer[0],)

    def truth_widths(self) -> tuple[int, int]:
        return self.shape.head_dim, self.shape.kv_lora_rank

    def store(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.kv.kv_buffer[0][slots] = k


def random_latent(pools: MlaPools, request: int, positions: range, generator: torch.Generator) -> torch.Tensor:
    """Write random cache rows for ``request`` at ``positions``; returns them ([n, 1, head_dim])."""
    rows = torch.randn(len(positions), 1, pools.shape.head_dim, generator=generator).to(DEVICE)
    pools.write(request, positions, rows, rows[..., : pools.shape.kv_lora_rank])
    return rows


def mla_layer(shape: MlaShape):
    """The RadixAttention layer DeepSeek's absorbed path hands the backend: one cached head of
    head_dim (latent + rope key) per token, V the latent."""
    from sglang.srt.layers.radix_attention import RadixAttention

    return RadixAttention(shape.num_heads, shape.head_dim, shape.scale, 1, layer_id=0,
                          v_head_dim=shape.kv_lora_rank)


def random_kv(pools: Pools, request: int, positions: range, generator: torch.Generator) -> None:
    """Write random K/V for ``request`` at ``positions``."""
    shape = pools.shape
    size = (len(positions), shape.num_kv_heads, shape.head_dim)
    pools.write(request, positions, torch.randn(size, generator=generator).to(DEVICE),
                torch.randn(size, generator=generator).to(DEVICE))


def normal(generator: torch.Generator, *size: int, dtype: torch.dtype) -> torch.Tensor:
    """N(0, 1) values drawn on the host (the same on every device), moved to the device."""
    return torch.randn(size, generator=generator).to(DEVICE, dtype)


def lineage(parents: list[int]) -> list[list[int]]:
    """Each draft token's ancestors and itself, root first: what it sees of the draft (``parents``: each
    token's parent among the draft tokens, -1 for the root, the last verified token)."""
    lines: list[list[int]] = []
    for token, parent in enumerate(parents):
        lines.append([*(lines[parent] if parent >= 0 else []), token])
    return lines


def chain_verify_batch(pools: Pools, committed: list[int], num_steps: int, *, host_mirrors: bool,
                       algorithm: str = "EAGLE", parents: list[int] | None = None, topk: int = 1):
    """An EAGLE verify as eagle_worker_v2 hands it to the target model: seq_lens is each request's
    committed length, its draft tokens are written at row positions committed + j (out_cache_loc),
    each at position committed + its depth, seeing the prefix and its lineage (custom_mask): the chain of
    num_steps + 1 tokens, or the tree ``parents`` (topk wide) for every request; seq_lens_cpu /
    seq_lens_sum are the committed lengths, or None on the GPU-only path."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleVerifyInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    parents = list(range(-1, num_steps)) if parents is None else parents
    lines, draft, bs = lineage(parents), len(parents), len(committed)
    positions = pools.tensor([n + len(line) - 1 for n in committed for line in lines])
    seen = torch.zeros(draft, draft, dtype=torch.bool)
    for token, line in enumerate(lines):
        seen[token, line] = True
    mask = torch.cat([torch.cat([torch.ones(draft, n, dtype=torch.bool), seen], 1).flatten() for n in committed])
    no_tree = torch.full((bs, draft), -1, dtype=torch.long, device=DEVICE)
    cpu = torch.tensor(committed, dtype=torch.int64) if host_mirrors else None
    total = sum(committed) if host_mirrors else None
    spec_info = EagleVerifyInput(
        draft_token=torch.zeros(bs * draft, dtype=torch.long, device=DEVICE), custom_mask=mask.to(DEVICE),
        positions=positions, retrieve_index=no_tree, retrieve_next_token=no_tree, retrieve_next_sibling=no_tree,
        retrieve_cum_len=None, spec_steps=num_steps, topk=topk, draft_token_num=draft,
        capture_hidden_mode=CaptureHiddenMode.FULL, seq_lens_sum=total, seq_lens_cpu=cpu)
    return ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs,
        input_ids=torch.zeros(bs * draft, dtype=torch.int64, device=DEVICE),
        req_pool_indices=pools.tensor(pools.req_pool_indices[:bs]), seq_lens=pools.tensor(committed),
        out_cache_loc=torch.cat([pools.slots(r, range(n, n + draft)) for r, n in enumerate(committed)]),
        seq_lens_sum=total, seq_lens_cpu=cpu, positions=positions, spec_info=spec_info,
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm))


def draft_decode_batch(pools: Pools, committed: list[int], topk: int, num_steps: int, *, host_mirrors: bool,
                       algorithm: str = "EAGLE"):
    """EAGLE's multi-step draft as eagle_worker_v2.draft hands it over (prepare_for_draft): a DECODE over
    the committed lengths (seq_lens = the KV-ready prefix), positions = that length per branch,
    out_cache_loc = each branch's num_steps slots after the prefix (page size 1 or topk 1: back to back,
    branch b of request r at row positions committed + b * num_steps + s); seq_lens_cpu / seq_lens_sum
    the committed lengths, or None on the GPU-only path. Step s's draft tokens write
    ``draft_step_slots(batch, s)``, and each should see its prefix and its branch's tokens 0..s."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    bs = len(committed)
    positions = pools.tensor([n for n in committed for _ in range(topk)])
    spec_info = EagleDraftInput(capture_hidden_mode=CaptureHiddenMode.LAST, num_tokens_per_req=topk,
                                num_tokens_for_logprob_per_req=topk)
    spec_info.positions = positions
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE, batch_size=bs,
        input_ids=torch.zeros(bs * topk, dtype=torch.int64, device=DEVICE),
        req_pool_indices=pools.tensor(pools.req_pool_indices[:bs]), seq_lens=pools.tensor(committed),
        out_cache_loc=torch.cat([pools.slots(r, range(n, n + topk * num_steps)) for r, n in enumerate(committed)]),
        seq_lens_sum=sum(committed) if host_mirrors else None,
        seq_lens_cpu=torch.tensor(committed) if host_mirrors else None, positions=positions, spec_info=spec_info,
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm))


def draft_step_slots(batch, step: int) -> torch.Tensor:
    """The slots draft step ``step`` writes, one per branch (eagle_worker_v2's per-step out_cache_loc)."""
    topk = batch.spec_info.num_tokens_per_req
    return batch.out_cache_loc.view(batch.batch_size, topk, -1)[:, :, step].reshape(-1).contiguous()


def extend_batch(pools: Pools, prefix_lens: list[int], extend_lens: list[int], algorithm: str | None = None):
    """A prefill (EXTEND) as the scheduler hands it over: request r has prefix_lens[r] tokens in the KV
    cache (a prefix-cache hit, or the chunks before this one) and extend_lens[r] new ones at row
    positions prefix .. prefix + extend - 1; every host mirror published."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    starts = torch.tensor([0, *extend_lens]).cumsum(0)[:-1].tolist()
    positions = [p + j for p, e in zip(prefix_lens, extend_lens) for j in range(e)]
    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=len(prefix_lens),
        input_ids=torch.zeros(sum(extend_lens), dtype=torch.int64, device=DEVICE),
        req_pool_indices=pools.tensor(pools.req_pool_indices[:len(prefix_lens)]), seq_lens=pools.tensor(seq_lens),
        out_cache_loc=torch.cat([pools.slots(r, range(p, p + e)) for r, (p, e) in enumerate(zip(prefix_lens,
                                                                                               extend_lens))]),
        seq_lens_sum=sum(seq_lens), seq_lens_cpu=torch.tensor(seq_lens), positions=pools.tensor(positions),
        extend_num_tokens=sum(extend_lens), extend_prefix_lens=pools.tensor(prefix_lens, torch.int32),
        extend_seq_lens=pools.tensor(extend_lens, torch.int32), extend_start_loc=pools.tensor(starts, torch.int32),
        extend_prefix_lens_cpu=list(prefix_lens), extend_seq_lens_cpu=list(extend_lens),
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm))


def forward_kv(pools: Pools, starts: list[int], counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The K and V a forward brings, as the model hands them to the backend: request r's rows
    starts[r] .. starts[r] + counts[r] - 1, requests in batch order, in the pools' dtype."""
    k, v = (torch.cat([pools.keys(r, range(start, start + count))[i]
                       for r, (start, count) in enumerate(zip(starts, counts))]) for i in (0, 1))
    return k.to(pools.shape.dtype), v.to(pools.shape.dtype)


def in_window(position: int, rows: range, window: int | None) -> list[int]:
    """The row positions of ``rows`` a query at model ``position`` sees under a sliding window of
    ``window`` (the HF config's: position - key < window), or all of them without one."""
    return [k for k in rows if window is None or position - k < window]


def attend(backend, batch, attention_layer, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None):
    """One forward of the layer as the model calls it (the output NaN until written): q [tokens,
    heads, head_dim], k and v [tokens, kv_heads, head_dim] or None -> [tokens, heads, v's head_dim] float64."""
    tokens, heads, dim = q.shape
    dim_v = dim if v is None else v.shape[-1]  # MLA: V is the latent, narrower than q and K
    batch._attn_output = torch.full((tokens, heads * dim_v), float("nan"), dtype=q.dtype, device=DEVICE)
    out = backend.forward(q.reshape(tokens, -1), k, v, attention_layer, batch, save_kv_cache=k is not None)
    return out.reshape(tokens, heads, dim_v).double()


def mla_draft_step_problems(backend, pools: MlaPools, batch, committed: list[int], generator: torch.Generator,
                            attention_backend: str, problems: Problems, path: str) -> None:
    """Run each attention step of a multi-step MLA draft backend, its init_forward_metadata done, as
    eagle_worker_v2.draft_forward does (topk 1: step s's token at row position committed + s, its
    cache row already in the pool). A step should see the prefix and the chain's tokens 0..s; what it
    sees otherwise is a problem of ``path``, told against attention over the prefix alone."""
    shape = pools.shape
    for step, step_backend in enumerate(backend.attn_backends):  # num_steps - 1 attention steps
        view = copy.copy(batch)
        view.out_cache_loc = draft_step_slots(batch, step)
        q = normal(generator, len(committed), shape.num_heads, shape.head_dim, dtype=shape.dtype)
        rows = torch.cat([pools.keys(r, [n + step])[0] for r, n in enumerate(committed)]).to(shape.dtype)
        out = attend_absorbed(step_backend, view, mla_layer(shape), q, rows, attention_backend)
        chain = worst_error(out, q, pools, [(r, list(range(n + step + 1))) for r, n in enumerate(committed)])
        prefix = worst_error(out, q, pools, [(r, list(range(n))) for r, n in enumerate(committed)])
        if not chain <= TOLERANCE[shape.dtype]:
            problems.add(f"{path}: draft step {step} (committed {committed}): off by {chain:.3g} from attention "
                         f"over the prefix and the chain's tokens 0..{step}; within {prefix:.3g} of attention over "
                         f"the prefix alone")


def mla_chain_draft(draft_backend_class, attention_backend: str, shape: MlaShape, committed: list[int],
                    num_steps: int, *, host_mirrors: bool) -> int:
    """An MLA model's EAGLE/MTP chain draft (topk 1) on ``draft_backend_class`` (a multi-step draft
    backend) served as ``--attention-backend attention_backend``, with the metadata of each path the
    draft worker takes: eager (init_forward_metadata, as eagle_worker_v2.draft calls it) and CUDA graph
    (init_cuda_graph_state, then the metadata a capture of this batch plans; the forwards then run
    outside a graph, on that metadata). Every request's prefix and draft tokens are in the pool; each
    attention step is checked (mla_draft_step_problems); returns the verdict's exit status."""
    generator = torch.Generator().manual_seed(0)
    problems = Problems()
    with server_state(attention_backend=attention_backend, page_size=shape.page_size,
                      **eagle_args(1, num_steps, num_steps + 1)) as args:
        pools = MlaPools(shape, [n + num_steps for n in committed], args)
        for request, length in enumerate(committed):
            random_latent(pools, request, range(length + num_steps), generator)
        for path in ("eager", "graph"):
            backend = draft_backend_class(model_runner(shape, pools, args, draft_worker=True), 1, num_steps)
            batch = draft_decode_batch(pools, committed, 1, num_steps, host_mirrors=host_mirrors)
            if path == "eager":
                backend.init_forward_metadata(batch)
            else:
                backend.init_cuda_graph_state(len(committed), len(committed))
                backend.init_forward_metadata_out_graph(batch, in_capture=True)
            mla_draft_step_problems(backend, pools, batch, committed, generator, attention_backend, problems, path)
    return verdict(problems, "every draft step sees its prefix and the chain's tokens up to itself, eager and "
                             "from the CUDA-graph metadata")


def attend_absorbed(backend, batch, attention_layer, q: torch.Tensor, rows: torch.Tensor, attention_backend: str):
    """One absorbed-MLA forward as DeepSeek's forward_absorb_core hands it to the backend served as
    ``--attention-backend attention_backend``: q [tokens, heads, head_dim] and the new cache rows
    [tokens, 1, head_dim] whole, or, for the backends sglang lists in FORWARD_ABSORB_CORE_ATTENTION_BACKENDS
    (FA3, FlashInfer), their latent parts with the rope parts apart (q_rope, k_rope)
    -> [tokens, heads, kv_lora_rank] float64."""
    from sglang.srt.models.deepseek_common.utils import FORWARD_ABSORB_CORE_ATTENTION_BACKENDS

    rank = attention_layer.v_head_dim
    latent = rows[..., :rank].contiguous()
    if attention_backend not in FORWARD_ABSORB_CORE_ATTENTION_BACKENDS:
        return attend(backend, batch, attention_layer, q, rows, latent)
    tokens, heads, _ = q.shape
    batch._attn_output = torch.full((tokens, heads * rank), float("nan"), dtype=q.dtype, device=DEVICE)
    out = backend.forward(q[..., :rank].contiguous(), latent, latent, attention_layer, batch, save_kv_cache=True,
                          q_rope=q[..., rank:].contiguous(), k_rope=rows[..., rank:].contiguous())
    return out.reshape(tokens, heads, rank).double()


def worst_error(out: torch.Tensor, q: torch.Tensor, pools: Pools, seen: list[tuple[int, list[int]]]) -> float:
    """The largest |out - reference| over the query tokens, token t of request seen[t][0] seeing the
    row positions seen[t][1]; inf where an output is NaN."""
    worst = 0.0
    for token, (request, positions) in enumerate(seen):
        keys, values = pools.keys(request, positions)
        error = (out[token] - reference(q[token], keys, values, pools.shape.scale)).abs()
        worst = max(worst, float("inf") if error.isnan().any() else float(error.max()))
    return worst


# bf16 / fp16 outputs round each element to 8 / 11 bits; the error allowed against float64
TOLERANCE = {torch.bfloat16: 0.02, torch.float16: 0.004, torch.float32: 1e-4}


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale) v in float64 for one query token over the keys it sees:
    q [heads, head_dim], k and v [keys, kv_heads, head_dim] -> [heads, head_dim]."""
    group = q.shape[0] // k.shape[1]
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,khd->hk", q.double(), k64) * scale
    return torch.einsum("hk,khd->hd", scores.softmax(-1), v64)


def captured(run) -> tuple["torch.cuda.CUDAGraph", torch.Tensor]:
    """``run()`` twice to warm up, as sglang's graph runner does, then captured once: (the graph, the output
    each replay writes)."""
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    return graph, out


def layer(shape: Shape, attn_type: str = "DECODER"):
    """The RadixAttention layer a model hands the backend."""
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

    window = {} if shape.sliding_window is None else {"sliding_window_size": shape.sliding_window}
    return RadixAttention(shape.num_heads, shape.head_dim, shape.scale, shape.num_kv_heads, layer_id=0,
                          attn_type=AttentionType[attn_type], **window)


class Problems(list):
    """What a reproducer found wrong, each printed as it is found (a corrupted process may not get
    to print it later)."""

    def add(self, text: str) -> None:
        print(f"BUG: {text}", flush=True)
        self.append(text)


def verdict(problems: Problems, ok: str) -> int:
    """Exit status 1 when the bug showed, else 0 with one line saying what was right."""
    if not problems:
        print(f"OK: {ok}", flush=True)
    return 1 if problems else 0
