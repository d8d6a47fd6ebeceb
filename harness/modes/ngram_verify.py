"""NGRAM verify: TARGET_VERIFY with a draft tree read from an n-gram corpus, not a draft model.

Production contract (sglang ngram_worker._prepare_for_speculative_decoding, 0.5.17
through 0.5.23): the batch is a TARGET_VERIFY forward whose spec_info is an
NgramVerifyInput; seq_lens = committed prefix, the draft_token_num window's K/V
are written at out_cache_loc, and custom_mask is, per request, the
[window, prefix + window] block [all-ones prefix | tree mask], flattened, as for
EAGLE. What differs is the tree: the corpus BFS is node-budgeted with no depth or
branching cap (NgramVerifyInput.max_tree_depth = draft_token_num, tree_topk = -1),
so any earlier node may be a parent, and the seq_lens_sum bookkeeping of the
ngram worker (sglang PR #26753's bug lived there). sglang 0.5.23's scheduler keeps
the host mirrors for NGRAM whatever the backend (decide_needs_cpu_seq_lens), and
the harness asks sglang rather than assuming so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.modes.base import fixed_window_problem
from harness.modes.target_verify import TargetVerify

if TYPE_CHECKING:
    from harness.base.case_spec import CaseSpec


# sglang's default --speculative-ngram-max-bfs-breadth (arg_groups/fields/spec.py, 0.5.17-0.5.23).
NGRAM_MAX_BFS_BREADTH = 10


class NgramVerify(TargetVerify):
    name = "ngram_verify"
    spec_algorithm = "NGRAM"
    most_committed_why = ("an ngram tree has no depth cap (max_tree_depth = draft_token_num), so one path may "
                          "hold all draft_token_num tokens")

    def most_committed(self, num_steps: int, window: int | None) -> int:
        return window

    def speculative_args(self, spec: CaseSpec) -> dict:
        """As sglang's _handle_ngram resolves them: topk is the BFS breadth, steps = tokens // topk.

        Backends size and choose their verify path from topk (FA3/FA4 take the
        custom-mask path only for topk > 1), so a chain-like topk 1 would test a
        configuration production never runs.
        """
        window = self.num_draft_tokens(spec)
        return dict(speculative_algorithm="NGRAM", speculative_eagle_topk=NGRAM_MAX_BFS_BREADTH,
                    speculative_num_steps=max(1, window // NGRAM_MAX_BFS_BREADTH),
                    speculative_num_draft_tokens=window)

    def validate(self, case: CaseSpec) -> str | None:
        problem = fixed_window_problem(case, "draft_token_num, the verified tree's node count",
                                       "the ngram worker verifies draft_token_num tokens per request")
        if problem:
            return problem
        if case.window < 2:
            return f"input_lens: an ngram tree holds a root and at least one draft, so >= 2; got {case.window}"
        if case.topk != 1:
            return "topk: ngram trees branch as the corpus matches; topk does not apply, leave it at 1"
        return None

    def tree(self, spec: CaseSpec, request: int) -> list[int]:
        """A BFS-ordered tree with arbitrary branching and depth, as the corpus search emits.

        Node j's parent is any node the BFS has already opened, i.e. parents
        never decrease; the first draft always hangs off the root.
        """
        window = spec.window
        gen = torch.Generator().manual_seed(spec.seed * 1000 + spec.first_request + request + 7)
        parents = [-1]
        for node in range(1, window):
            earliest = parents[-1] if node > 1 else 0
            parents.append(int(torch.randint(max(earliest, 0), node, (1,), generator=gen)))
        return parents

    def verify_input(self, state, fields: dict, window: int):
        from sglang.srt.speculative.ngram_info import NgramVerifyInput

        return NgramVerifyInput(**self.tree_inputs(state, fields, window))


MODE = NgramVerify()
