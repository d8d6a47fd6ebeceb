"""attn-harness: differential tests of sglang attention backends under speculative decoding."""

from harness import platform as _platform  # noqa: F401  (sets TRITON_INTERPRET before torch)
