"""Q/K/V for each forward, drawn once and shared by the backend and the reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from harness.compare import census_heads
from harness.pools import BatchState
from harness.reference import reference_attention

if TYPE_CHECKING:
    from harness.modes.base import ForwardStep


@dataclass
class StepInputs:
    q: torch.Tensor  # [tokens, heads * head_dim] on the device
    k: torch.Tensor  # [tokens, kv_heads, head_dim]
    v: torch.Tensor
    expected: torch.Tensor  # float64 [tokens, heads, head_dim], on CPU

    def poisoned_output(self) -> torch.Tensor:
        """Output buffer handed to backends that accept one: NaN until written."""
        return torch.full_like(self.q, float("nan"))


def draw_inputs(state: BatchState, steps: list[ForwardStep], scale: float) -> list[StepInputs]:
    """Draw every step's Q/K/V and compute the reference, in step order.

    Q is random except in the key-census head (harness/compare.py), where it is 0.

    Later draft-decode steps see K/V written by earlier ones, so the harness
    copy of each row is updated step by step before that step's reference.
    """
    spec = state.spec
    drawn = []
    for step in steps:
        tokens = len(step.queries)
        q = state.randn(tokens, spec.num_heads, spec.head_dim)
        q[:, census_heads(spec.num_heads)] = 0
        k = state.randn(tokens, spec.num_kv_heads, spec.head_dim)
        v = state.randn(tokens, spec.num_kv_heads, spec.head_dim)
        state.record_new_kv(step.writes, k, v)
        expected = reference_attention(q, step.queries, state.row_k, state.row_v, scale)
        drawn.append(StepInputs(q.reshape(tokens, -1).to(state.device), k.to(state.device),
                                v.to(state.device), expected))
    return drawn
