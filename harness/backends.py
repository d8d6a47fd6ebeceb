"""Backend entries: how to build each sglang backend for each role, and its limits.

One entry per backend, OpInfo-style: the code that runs cases is generic; what
differs between backends is data here (the sglang classes to build, the
hardware they need, the combinations they reject and why). A limit is stated
with the backend's own reason so a skipped cell says why it did not run.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Callable

from harness import platform
from harness.cases import CaseSpec


def _build(module: str, target: str, draft_multi_step: str, **ctor_kwargs):
    """Builder from class names: target/draft roles share the single-step class."""

    def build(role: str, model_runner, spec: CaseSpec):
        mod = importlib.import_module(module)
        if role == "draft_multi_step":
            return getattr(mod, draft_multi_step)(model_runner, spec.topk, spec.num_steps, **ctor_kwargs)
        return getattr(mod, target)(model_runner, **ctor_kwargs)

    return build


@dataclass(frozen=True)
class Limit:
    """A combination the backend does not take: predicate on (mode, spec) -> skip reason."""

    applies: Callable[[str, CaseSpec], bool]
    reason: str


@dataclass(frozen=True)
class BackendEntry:
    name: str
    server_arg: str  # sglang --attention-backend value
    build: Callable
    needs_gpu: bool
    import_check: str  # module whose import proves the backend's kernels are installed
    limits: tuple[Limit, ...] = field(default=())
    min_capability: tuple[int, int] | None = None
    graph_hooks: bool = True  # init_cuda_graph_state and the out/in-graph hooks exist

    def skip_reason(self, mode: str, spec: CaseSpec) -> str | None:
        if self.needs_gpu and not platform.HAS_GPU:
            return f"{self.name} needs a CUDA GPU (this machine has none)"
        if not platform.HAS_GPU and spec.dtype == "bfloat16":
            return "bf16 is broken in Triton's CPU interpreter (triton-lang/triton#11584); runs on GPU"
        if self.min_capability and platform.HAS_GPU:
            import torch

            if torch.cuda.get_device_capability() < self.min_capability:
                return f"{self.name} needs compute capability >= {self.min_capability}"
        if importlib.util.find_spec(self.import_check.split(".")[0]) is None:
            return f"{self.name}: package providing '{self.import_check}' is not installed"
        for limit in self.limits:
            if limit.applies(mode, spec):
                return f"{self.name}: {limit.reason}"
        return None


def _mode_in(*modes: str) -> Callable[[str, CaseSpec], bool]:
    return lambda mode, spec: mode in modes


_FLASH_ATTENTION = "sglang.srt.layers.attention.flashattention_backend"

BACKENDS: dict[str, BackendEntry] = {
    entry.name: entry
    for entry in (
        BackendEntry(
            name="triton", server_arg="triton", needs_gpu=False, import_check="triton",
            build=_build("sglang.srt.layers.attention.triton_backend",
                         "TritonAttnBackend", "TritonMultiStepDraftBackend"),
        ),
        BackendEntry(
            name="flashinfer", server_arg="flashinfer", needs_gpu=True, import_check="flashinfer",
            build=_build("sglang.srt.layers.attention.flashinfer_backend",
                         "FlashInferAttnBackend", "FlashInferMultiStepDraftBackend"),
            limits=(Limit(lambda mode, spec: spec.dtype == "float32",
                          "FlashInfer kernels take fp16/bf16 (fp32 raises KeyError: torch.float32)"),),
        ),
        BackendEntry(
            name="fa3", server_arg="fa3", needs_gpu=True, import_check="sgl_kernel.flash_attn",
            build=_build(_FLASH_ATTENTION, "FlashAttentionBackend", "FlashAttentionMultiStepBackend",
                         fa_impl_ver=3),
            min_capability=(8, 0),
            limits=(Limit(lambda mode, spec: spec.dtype == "float32",
                          "FA3 kernels take fp16/bf16 only (sgl_kernel flash_attn dtype check)"),),
        ),
        BackendEntry(
            name="fa4", server_arg="fa4", needs_gpu=True, import_check="cutlass",
            build=_build(_FLASH_ATTENTION, "FlashAttentionBackend", "FlashAttentionMultiStepBackend",
                         fa_impl_ver=4),
            min_capability=(9, 0),
            limits=(Limit(lambda mode, spec: spec.dtype == "float32",
                          "FA4 CuTe: inputs must be float16, bfloat16, fp8 e4m3fn, or fp8 e5m2"),),
        ),
        BackendEntry(
            name="torch_native", server_arg="torch_native", needs_gpu=False, import_check="torch",
            build=_build("sglang.srt.layers.attention.torch_native_backend",
                         "TorchNativeAttnBackend", "TorchNativeAttnBackend"),
            graph_hooks=False,
            limits=(
                Limit(_mode_in("draft_decode"),
                      "EAGLE is not supported in decode attention backend torch_native "
                      "(sglang DraftBackendFactory; no multi-step class)"),
                Limit(_mode_in("target_verify"),
                      "TARGET_VERIFY is not supported: forward_extend ignores spec_info.custom_mask "
                      "and reads extend_prefix_lens, which verify batches do not carry"),
            ),
        ),
    )
}
