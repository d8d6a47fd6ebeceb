"""TARGET_VERIFY: the target model scores a window of draft tokens per request.

Production contract (sglang 0.5.17, eagle_worker_v2 / EagleVerifyInput):
seq_lens = committed prefix only; the window's K/V arrive with the forward and
are written at out_cache_loc; seq_lens_sum / seq_lens_cpu mirror the prefix
(None on the GPU-only path). A chain (topk 1) is causal within the window; a
tree (topk > 1) lets each token see the prefix, its ancestors and itself,
given to backends as spec_info.custom_mask: per request a
[window, prefix + window] boolean block, flattened. A tree node sits at model
position prefix + its depth (not its row, prefix + node): a model window
(sliding_window) is applied on those positions.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from harness.checks.reference import Query
from harness.modes.base import ForwardStep, WindowedMode, base_fields, fixed_window_problem, visible_spans

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec


def max_tree_nodes(topk: int, num_steps: int) -> int:
    """The most tokens a topk / num_steps EAGLE tree can hold, root included."""
    return 1 + sum(topk**depth for depth in range(1, num_steps + 1))


def draft_tree(spec: CaseSpec, request: int) -> list[int]:
    """Parent of each window token (-1 for the root), as EAGLE builds trees.

    Parents precede children; each node has at most topk children and depth at
    most num_steps. A chain is parent[j] = j - 1. Trees vary per request (its number in the case:
    a request cut out of its batch keeps its tree).
    """
    window = spec.window
    if spec.topk == 1:
        return [j - 1 for j in range(window)]
    gen = torch.Generator().manual_seed(spec.seed * 1000 + spec.first_request + request)
    parents, depth, children = [-1], [0], [0]
    for _ in range(1, window):
        open_nodes = [n for n in range(len(parents))
                      if depth[n] < spec.num_steps and children[n] < spec.topk]
        parent = open_nodes[int(torch.randint(len(open_nodes), (1,), generator=gen))]
        parents.append(parent)
        depth.append(depth[parent] + 1)
        children.append(0)
        children[parent] += 1
    return parents


def ancestors_or_self(parents: list[int], node: int) -> list[int]:
    chain = []
    while node != -1:
        chain.append(node)
        node = parents[node]
    return sorted(chain)


class TargetVerify(WindowedMode):
    name = "target_verify"
    backend_role = "target"
    forward_mode = "TARGET_VERIFY"
    takes_draft_window = False

    def validate(self, case: CaseSpec) -> str | None:
        problem = fixed_window_problem(case, "the verify window, e.g. num_steps + 1 for a chain",
                                       "sglang verifies a fixed window per request")
        if problem:
            return problem
        window, most = case.window, max_tree_nodes(case.topk, case.num_steps)
        if case.topk == 1 and window != case.num_steps + 1:
            return f"input_lens: a chain (topk 1) verifies num_steps + 1 = {case.num_steps + 1} tokens, got {window}"
        if case.topk > 1 and not 2 <= window <= most:
            return f"input_lens: a topk {case.topk} / {case.num_steps}-step tree holds 2..{most} tokens, got {window}"
        return None

    def tree(self, spec: CaseSpec, request: int) -> list[int]:
        return draft_tree(spec, request)

    def steps(self, spec: CaseSpec) -> list[ForwardStep]:
        queries, writes, labels = [], [], []
        for request, prefix in enumerate(spec.prefix_lens):
            parents = self.tree(spec, request)
            for node in range(len(parents)):
                chain = ancestors_or_self(parents, node)  # in depth order: node a sits at prefix + depth
                own = tuple((prefix + a, prefix + depth) for depth, a in enumerate(chain))
                queries.append(Query(request, visible_spans(spec, own[-1][1], (range(prefix),), own)))
                writes.append((request, prefix + node))
                labels.append(f"request {request} draft token {node}")
        return [ForwardStep(queries, writes, labels)]

    def custom_mask(self, spec: CaseSpec) -> torch.Tensor:
        blocks = []
        for request, prefix in enumerate(spec.prefix_lens):
            parents = self.tree(spec, request)
            block = torch.zeros(len(parents), prefix + len(parents), dtype=torch.bool)
            block[:, :prefix] = True
            for node in range(len(parents)):
                block[node, [prefix + a for a in ancestors_or_self(parents, node)]] = True
            blocks.append(block.flatten())
        return torch.cat(blocks)

    def forward_batch(self, state, steps: list[ForwardStep]):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        spec = state.spec
        window = self.num_draft_tokens(spec)
        writes = steps[0].writes
        positions = [position for _, position in writes]
        fields = base_fields(
            state, ForwardMode.TARGET_VERIFY, seq_lens=list(spec.prefix_lens),
            out_slots=state.layout.slots_at(writes),
            num_tokens=len(writes), positions=positions, spec_info=None, algorithm=self.spec_algorithm)
        fields["spec_info"] = self.verify_input(state, fields, window)
        return ForwardBatch(**fields)

    def tree_inputs(self, state, fields: dict, window: int) -> dict:
        """What every verify spec_info carries for attention (retrieve_* are unused by it)."""
        spec = state.spec
        no_tree = torch.full((spec.bs, window), -1, dtype=torch.long, device=state.device)
        return dict(draft_token=torch.zeros(spec.bs * window, dtype=torch.long, device=state.device),
                    custom_mask=self.custom_mask(spec).to(state.device), positions=fields["positions"],
                    retrieve_index=no_tree, retrieve_next_token=no_tree, retrieve_next_sibling=no_tree,
                    draft_token_num=window)

    def verify_input_class(self):
        from sglang.srt.speculative.eagle_info import EagleVerifyInput

        return EagleVerifyInput

    def verify_input(self, state, fields: dict, window: int):
        """The spec_info eagle_worker_v2 hands the target model."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

        spec = state.spec
        return self.verify_input_class()(
            **self.tree_inputs(state, fields, window), retrieve_cum_len=None, spec_steps=spec.num_steps, topk=spec.topk,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=fields["seq_lens_sum"], seq_lens_cpu=fields["seq_lens_cpu"],
        )

    def step_views(self, backend, forward_batch):
        return [(backend, forward_batch)]

    def capture_spec_info(self, spec_info, static, tokens_per_request: int):
        """The decode graph runner captures with an all-True mask buffer."""
        capture = copy.copy(spec_info)
        fill_rows = static.batch_size * (int(static.seq_lens.max()) + tokens_per_request)
        capture.custom_mask = torch.ones(fill_rows * tokens_per_request, dtype=torch.bool,
                                         device=static.seq_lens.device)
        capture.positions = static.positions
        return capture

    def replay_spec_info(self, spec_info, static, tokens_per_request: int):
        """Replay hands the backend the raw (unpadded) verify input."""
        return spec_info


MODE = TargetVerify()
