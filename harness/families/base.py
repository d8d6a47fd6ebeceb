"""What an attention family is, as data the generic cell consumes.

A family is the attention a model's layer computes and everything that follows from it: the
layer's shape (heads, the dims of Q/K and of V, the softmax scale), the KV pool sglang keeps for
it and how the model writes it, the Q/K/V each forward hands the backend, the independent
reference that judges the output, the model-runner fields backends read for it, its backend
entries and its cases (``cases/<case_folder>``). Dense multi-head attention (with GQA and sliding
windows) is one family; DeepSeek's multi-head latent attention (MLA) is another. The cell
(harness/cell/run_cell.py), the runner forms and the reports never branch on a family's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from harness.base.case_spec import CaseSpec
    from harness.fixtures.backends import BackendEntry
    from harness.fixtures.pools import BatchState, SlotLayout, StepInputs
    from harness.modes.base import ForwardStep


@dataclass(frozen=True)
class LayerShape:
    """One attention layer as one GPU runs it: what sglang's RadixAttention is built with."""

    num_heads: int  # query heads on this GPU
    num_kv_heads: int  # cached heads per token (MLA: 1, the latent)
    qk_head_dim: int  # what each query and key head carries
    v_head_dim: int  # what each value head, and each output head, carries
    scale: float  # the softmax scale the model gives the layer
    pool_dims: int  # values sglang's KV pool keeps a token, all heads (dense: K and V; MLA: latent + rope key)


class AttentionFamily(Protocol):
    name: str
    case_folder: str  # where its case files live under cases/ ("" for the top folder)
    backends: dict[str, BackendEntry]  # its backend entries, by name
    unserved_modes: dict[str, str]  # forward modes sglang never runs with this family, and why, from its source

    def shape(self, spec: CaseSpec) -> LayerShape: ...
    def triton_kv_splits(self, spec: CaseSpec, setting: int, sm_count: int) -> int: ...  # Triton's max_kv_splits
    def validate(self, spec: CaseSpec) -> str | None: ...  # "field: what is wrong", or None
    def build_state(self, spec: CaseSpec, layout: SlotLayout, row_lens: list[int], device: str,
                    server_args) -> BatchState: ...
    def draw_inputs(self, state: BatchState, steps: list[ForwardStep], shape: LayerShape,
                    census_splits: tuple[str, ...]) -> list[StepInputs]: ...
    def forward(self, backend, inputs: StepInputs | tuple, layer, forward_batch, save_kv_cache: bool) -> torch.Tensor: ...
    def runner_fields(self, spec: CaseSpec, context_len: int) -> dict: ...  # model_runner attributes it sets
