"""attn-harness: differential tests of sglang attention backends under speculative decoding."""

from pathlib import Path

from harness.base import platform as _platform  # noqa: F401  (sets TRITON_INTERPRET before torch)
from harness.base import kernel_caches as _kernel_caches  # noqa: F401  (cache folders before the libraries load)

ROOT = Path(__file__).resolve().parent.parent  # the repository: cases/, reports/, locks/, KNOWN_FAILURES.md
