"""Real sglang pools, filled and poisoned, plus the harness's own copy of the KV.

Everything a backend could read that no request owns is NaN: unused KV slots,
and req_to_token entries past a request's length (they point at a poisoned
slot). A backend that reads the wrong memory therefore produces NaN, which the
comparison reports, instead of plausible numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from harness.cases import CaseSpec
from harness.kv_layout import KvLayout
from harness.releases import since

# A case that states no context_len runs on a model of at least this context (Llama-2 class):
# production sizes buffers from the model, not from the requests in flight, so short requests
# meet wide buffers as they do there.
DEFAULT_MODEL_CONTEXT_LEN = 4096


def max_request_len(context_len: int) -> int:
    """The longest committed prefix a request reaches: sglang's max_req_len (tp_worker: context_len - 1)."""
    return context_len - 1


def model_context_len(spec: CaseSpec) -> int:
    """The model's context length: the case's, or the default doubled until the longest prefix fits.

    Never derived to just fit the case: backends size their buffers from it as they do in production.
    """
    context_len = spec.context_len or DEFAULT_MODEL_CONTEXT_LEN
    while not spec.context_len and max_request_len(context_len) < max(spec.prefix_lens):
        context_len *= 2
    return context_len


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
    return model_context_len(spec) + _REQ_TO_TOKEN_HEADROOM.value(server_args)


@dataclass
class BatchState:
    """Pools as a backend sees them, and the truth the reference uses."""

    spec: CaseSpec
    layout: KvLayout
    device: str
    pools: SimpleNamespace
    row_k: list[torch.Tensor]  # per request [row_len, kv_heads, head_dim], NaN where unwritten
    row_v: list[torch.Tensor]
    gen: torch.Generator = field(repr=False)

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.spec.dtype)

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen).to(self.dtype)

    def tensor(self, values, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def record_new_kv(self, writes: list[tuple[int, int]], k: torch.Tensor, v: torch.Tensor) -> None:
        """Note in the harness copy the K/V this forward hands the backend to store."""
        for row, (request, position) in enumerate(writes):
            self.row_k[request][position] = k[row].cpu()
            self.row_v[request][position] = v[row].cpu()


def build_state(spec: CaseSpec, layout: KvLayout, row_lens: list[int], device: str, server_args) -> BatchState:
    """Called inside sglang_state: the req_to_token width is sglang's answer for these server args."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    gen = torch.Generator().manual_seed(spec.seed)
    dtype = getattr(torch, spec.dtype)
    context_len = model_context_len(spec)
    req_to_token = ReqToTokenPool(size=layout.pool_rows - 1, max_context_len=req_to_token_width(spec, server_args),
                                  device=device, enable_memory_saver=False)
    kv = MHATokenToKVPool(size=layout.pool_slots, page_size=spec.page_size, dtype=dtype,
                          head_num=spec.num_kv_heads, head_dim=spec.head_dim, layer_num=1,
                          device=device, enable_memory_saver=False)
    req_to_token.req_to_token[1:] = layout.poison_slot
    for request, row in enumerate(layout.req_pool_indices):
        slots = layout.row_slots[request]
        req_to_token.req_to_token[row, : len(slots)] = torch.tensor(slots, dtype=torch.int32)

    k_buffer, v_buffer = kv.k_buffer[0], kv.v_buffer[0]
    k_buffer.fill_(float("nan"))
    v_buffer.fill_(float("nan"))
    k_buffer[: spec.page_size] = 0  # sglang's padding page: padded rows read it
    v_buffer[: spec.page_size] = 0

    shape = (spec.num_kv_heads, spec.head_dim)
    row_k = [torch.full((n, *shape), float("nan"), dtype=dtype) for n in row_lens]
    row_v = [torch.full((n, *shape), float("nan"), dtype=dtype) for n in row_lens]
    state = BatchState(spec, layout, device, SimpleNamespace(req_to_token=req_to_token, kv=kv,
                                                             context_len=context_len),
                       row_k, row_v, gen)
    for request, prefix in enumerate(spec.prefix_lens):
        k, v = state.randn(prefix, *shape), state.randn(prefix, *shape)
        row_k[request][:prefix], row_v[request][:prefix] = k, v
        slots = torch.tensor(layout.row_slots[request][:prefix], dtype=torch.long, device=device)
        k_buffer[slots] = k.to(device)
        v_buffer[slots] = v.to(device)
    return state
