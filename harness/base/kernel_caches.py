"""Where the backends' compiled kernels are kept on disk: one registry, one optional root.

Triton, FlashInfer's JIT and sglang's CuTe-DSL kernels (FA4) each keep what they compile in a
folder of their own, shared by every process on the machine, so a kernel compiled once (by the
warm-up pass, harness/speed/warmup.py) is only loaded by every worker after it. Left alone, each
library uses its per-machine default. With ``ATTN_HARNESS_KERNEL_CACHE=<folder>`` all of them live
under that one folder instead, which can be kept between runs, or packed and carried to a fresh
GPU machine so that nothing is compiled there twice. The variables are set before any of the
libraries is imported (harness/__init__.py imports this module first), and a variable the user
set stays as the user set it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT_ENV = "ATTN_HARNESS_KERNEL_CACHE"


@dataclass(frozen=True)
class KernelCache:
    library: str
    env: str  # the library's own variable for its cache folder
    subfolder: str  # under ATTN_HARNESS_KERNEL_CACHE
    default: str  # the library's default when neither is set ('~' expanded)
    holds: str  # the path below the variable's folder where the kernels are (FlashInfer adds one)

    def folder(self) -> Path:
        base = os.environ.get(self.env) or os.path.expanduser(self.default)
        return Path(base) / self.holds


KERNEL_CACHES = (
    KernelCache("triton", "TRITON_CACHE_DIR", "triton", "~/.triton/cache", ""),
    # FlashInfer resolves its workspace at import time, as <base>/.cache/flashinfer.
    KernelCache("flashinfer", "FLASHINFER_WORKSPACE_BASE", "flashinfer", "~", ".cache/flashinfer"),
    # sglang 0.5.23's FA4 (sglang.kernels.jit.cute_aot_cache): persistent unless set to "".
    KernelCache("cute-dsl (sglang fa4)", "SGLANG_CUTE_AOT_CACHE_DIR", "cute_aot", "~/.cache/sglang/cute_aot", ""),
    KernelCache("cuda driver (PTX JIT)", "CUDA_CACHE_PATH", "nv", "~/.nv/ComputeCache", ""),
)


def point_caches_at_root() -> None:
    """Under ATTN_HARNESS_KERNEL_CACHE, give every library a subfolder (user-set variables win)."""
    root = os.environ.get(ROOT_ENV)
    if root:
        for cache in KERNEL_CACHES:
            os.environ.setdefault(cache.env, str(Path(root).expanduser() / cache.subfolder))


def folders() -> list[Path]:
    """Every kernel cache folder as this process resolves it (for clearing and reporting)."""
    return [cache.folder() for cache in KERNEL_CACHES]


point_caches_at_root()
