"""Eager form: init metadata once, then one backend forward per step, as the workers do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.forward_inputs import StepInputs
from harness.invariants import check_backend

if TYPE_CHECKING:
    from harness.modes.base import SpecMode


def run_eager(mode: SpecMode, backend, forward_batch, step_inputs: list[StepInputs], layer) -> list:
    """Return each step's output [tokens, heads * head_dim]."""
    backend.init_forward_metadata(forward_batch)
    check_backend(backend, "eager init_forward_metadata")
    outputs = []
    for inputs, (step_backend, view) in zip(step_inputs, mode.step_views(backend, forward_batch)):
        view._attn_output = inputs.poisoned_output()
        outputs.append(step_backend.forward(inputs.q, inputs.k, inputs.v, layer, view))
    return outputs
