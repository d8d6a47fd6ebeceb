"""Dense multi-head attention (MHA, GQA, sliding windows): the first attention family.

Its pieces predate the family registry and stay where the layers put them: the pools and each
forward's Q/K/V in harness/fixtures/pools.py, the oracle in harness/checks/reference.py (the modes
describe what each query sees with its ``Query``, so it sits below them), the model-runner stand-in
in harness/fixtures/sglang_env.py. This module binds them into the family; its entries are in
``backends``, its cases are the files straight under cases/.

May import: base, checks, modes, fixtures.
"""

from __future__ import annotations

from harness.base.case_spec import CaseSpec
from harness.families.base import LayerShape
from harness.families.dense.backends import ENTRIES
from harness.fixtures import pools, sglang_env


class DenseFamily:
    name = "dense"
    case_folder = ""
    backends = ENTRIES
    unserved_modes: dict[str, str] = {}

    def shape(self, spec: CaseSpec) -> LayerShape:
        return LayerShape(spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.head_dim, spec.head_dim ** -0.5,
                          pool_dims=2 * spec.num_kv_heads * spec.head_dim)

    def triton_kv_splits(self, spec: CaseSpec, setting: int, sm_count: int) -> int:
        """TritonAttnBackend keeps --triton-attention-num-kv-splits for dense attention."""
        return setting

    def validate(self, spec: CaseSpec) -> str | None:
        if spec.model:
            return (f"model: {spec.model!r} names a served model of another attention family; a dense case "
                    "gives num_heads, num_kv_heads and head_dim")
        return None

    def build_state(self, spec, layout, row_lens, device, server_args):
        return pools.build_state(spec, layout, row_lens, device, server_args)

    def draw_inputs(self, state, steps, shape: LayerShape, census_splits):
        return pools.draw_inputs(state, steps, shape.scale, census_splits)

    def forward(self, server_arg: str, backend, q, k, v, layer, forward_batch, save_kv_cache: bool):
        """As sglang's RadixAttention hands the backend a dense layer's Q/K/V."""
        return backend.forward(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache)

    def runner_fields(self, spec: CaseSpec, context_len: int) -> dict:
        return dict(model_config=sglang_env.model_config(spec, context_len), use_mla_backend=False)


FAMILY = DenseFamily()
