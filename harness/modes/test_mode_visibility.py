"""Each mode's visibility lists and tree masks against ones written out by hand for small cases.

The reference trusts these lists completely; a mistake here would make the
harness expect the wrong answer from every backend.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.base.case_spec import CaseSpec
from harness.case.cases import spec_from_fields
from harness.modes import (DFLASH_DRAFT, DFLASH_VERIFY, DRAFT_DECODE, DRAFT_EXTEND_V2, FROZEN_KV_MTP_DRAFT,
                           FROZEN_KV_MTP_VERIFY, NGRAM_VERIFY, TARGET_VERIFY)
from harness.modes import dflash_verify, target_verify


def spec(**fields) -> CaseSpec:
    return spec_from_fields({"name": "hand", "bs": 1, "prefix_lens": [3], "num_steps": 3, **fields})


def visible(step) -> list[tuple[int, tuple[int, ...]]]:
    return [(q.request, q.positions()) for q in step.queries]


def test_target_verify_chain():
    case = spec(bs=2, prefix_lens=[3, 1], input_lens=4)
    (step,) = TARGET_VERIFY.steps(case)
    assert visible(step) == [
        (0, (0, 1, 2, 3)), (0, (0, 1, 2, 3, 4)), (0, (0, 1, 2, 3, 4, 5)), (0, (0, 1, 2, 3, 4, 5, 6)),
        (1, (0, 1)), (1, (0, 1, 2)), (1, (0, 1, 2, 3)), (1, (0, 1, 2, 3, 4)),
    ]
    assert step.writes == [(0, 3), (0, 4), (0, 5), (0, 6), (1, 1), (1, 2), (1, 3), (1, 4)]
    assert TARGET_VERIFY.row_lens(case) == [7, 5]


TREE = [-1, 0, 0, 1, 2]  # topk 2: root, two children, one grandchild under each


def test_target_verify_topk2_tree_visibility_and_mask(monkeypatch):
    monkeypatch.setattr(target_verify, "draft_tree", lambda case, request: TREE)
    case = spec(prefix_lens=[2], topk=2, input_lens=5)
    (step,) = TARGET_VERIFY.steps(case)
    assert visible(step) == [(0, (0, 1, 2)), (0, (0, 1, 2, 3)), (0, (0, 1, 2, 4)),
                             (0, (0, 1, 2, 3, 5)), (0, (0, 1, 2, 4, 6))]
    mask = TARGET_VERIFY.custom_mask(case).reshape(5, 7).int()
    assert mask.tolist() == [
        # prefix  tree nodes 0..4
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 0, 1, 0, 0],
        [1, 1, 1, 1, 0, 1, 0],
        [1, 1, 1, 0, 1, 0, 1],
    ]


def test_target_verify_mask_is_per_request_blocks_of_window_by_row():
    case = spec(bs=2, prefix_lens=[2, 0], input_lens=3)
    mask = TARGET_VERIFY.custom_mask(case)
    assert mask.numel() == 3 * 5 + 3 * 3
    assert mask[15:].reshape(3, 3).int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]


@pytest.mark.parametrize("topk,num_steps,window", [(2, 3, 6), (2, 2, 7), (4, 3, 10), (3, 1, 4)])
@pytest.mark.parametrize("seed", range(5))
def test_draft_trees_are_trees_eagle_can_build(topk, num_steps, window, seed):
    parents = target_verify.draft_tree(spec(topk=topk, num_steps=num_steps, input_lens=window, seed=seed), 0)
    assert len(parents) == window and parents[0] == -1
    assert all(0 <= p < node for node, p in enumerate(parents) if node)
    assert all(parents.count(node) <= topk for node in range(window))
    assert all(len(target_verify.ancestors_or_self(parents, node)) <= num_steps + 1 for node in range(window))


@pytest.mark.parametrize("window", [2, 5, 8])
@pytest.mark.parametrize("seed", range(5))
def test_ngram_trees_are_bfs_ordered_corpus_trees(window, seed):
    """Any opened node may parent the next, parents never decrease, the first draft hangs off the root."""
    case = spec(bs=2, prefix_lens=[3, 3], input_lens=window, seed=seed)
    for request in range(2):
        parents = NGRAM_VERIFY.tree(case, request)
        assert len(parents) == window and parents[:2] == [-1, 0][:window]
        assert all(0 <= p < node for node, p in enumerate(parents) if node)
        assert parents[1:] == sorted(parents[1:])


def test_ngram_verify_sees_what_its_tree_says(monkeypatch):
    """A deep ngram chain-with-branch, parents [-1, 0, 1, 1, 3], after a 1-token prefix."""
    monkeypatch.setattr(type(NGRAM_VERIFY), "tree", lambda self, case, request: [-1, 0, 1, 1, 3])
    (step,) = NGRAM_VERIFY.steps(spec(prefix_lens=[1], input_lens=5))
    assert visible(step) == [(0, (0, 1)), (0, (0, 1, 2)), (0, (0, 1, 2, 3)), (0, (0, 1, 2, 4)),
                             (0, (0, 1, 2, 4, 5))]


def test_draft_extend_v2_causal_window():
    case = spec(bs=2, prefix_lens=[2, 0], input_lens=3)
    (step,) = DRAFT_EXTEND_V2.steps(case)
    assert visible(step) == [(0, (0, 1, 2)), (0, (0, 1, 2, 3)), (0, (0, 1, 2, 3, 4)),
                             (1, (0,)), (1, (0, 1)), (1, (0, 1, 2))]
    assert step.writes == [(0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2)]


def test_draft_decode_branches():
    """prefix 2, topk 2, 3 steps: branch k's token of step s sits at 2 + 3k + s."""
    case = spec(prefix_lens=[2], topk=2)
    step0, step1 = DRAFT_DECODE.steps(case)
    assert visible(step0) == [(0, (0, 1, 2)), (0, (0, 1, 5))]
    assert step0.writes == [(0, 2), (0, 5)]
    assert visible(step1) == [(0, (0, 1, 2, 3)), (0, (0, 1, 5, 6))]
    assert step1.writes == [(0, 3), (0, 6)]
    assert DRAFT_DECODE.row_lens(case) == [8]


@pytest.mark.parametrize("prefix,window,sink,seen", [
    (10, 3, 2, (0, 1, 7, 8, 9)),  # the sink, then the most recent window
    (10, 4, 0, (6, 7, 8, 9)),  # a window alone
    (4, 3, 2, (0, 1, 2, 3)),  # a prefix shorter than sink + window is read whole
])
def test_draft_decode_window_and_sink(prefix, window, sink, seen):
    """sglang 0.5.21+'s draft window / sink: the prefix a draft query reads, then its own branch."""
    case = spec(prefix_lens=[prefix], topk=1, draft_window=window, draft_sink=sink)
    step0, step1 = DRAFT_DECODE.steps(case)
    assert visible(step0) == [(0, (*seen, prefix))]
    assert visible(step1) == [(0, (*seen, prefix, prefix + 1))]


def test_draft_decode_step_views_take_each_steps_slots():
    """out_cache_loc is ordered (request, branch, step); step s writes its column."""
    slots = torch.tensor([100 * r + 10 * k + s for r in range(2) for k in range(2) for s in range(3)])
    batch = SimpleNamespace(batch_size=2, spec_info=SimpleNamespace(num_tokens_per_req=2), out_cache_loc=slots)
    backend = SimpleNamespace(attn_backends=["step0", "step1"])
    views = DRAFT_DECODE.step_views(backend, batch)
    assert [name for name, _ in views] == ["step0", "step1"]
    assert views[0][1].out_cache_loc.tolist() == [0, 10, 100, 110]
    assert views[1][1].out_cache_loc.tolist() == [1, 11, 101, 111]


def test_dflash_verify_block_is_a_chain_and_rows_hold_the_reservation():
    """prefix 3, block 3: token j sees the prefix and block tokens 0..j; 2 x block slots reserved."""
    case = spec(bs=2, prefix_lens=[3, 1], input_lens=3, num_steps=1)
    (step,) = DFLASH_VERIFY.steps(case)
    assert visible(step) == [(0, (0, 1, 2, 3)), (0, (0, 1, 2, 3, 4)), (0, (0, 1, 2, 3, 4, 5)),
                             (1, (0, 1)), (1, (0, 1, 2)), (1, (0, 1, 2, 3))]
    assert step.writes == [(0, 3), (0, 4), (0, 5), (1, 1), (1, 2), (1, 3)]
    assert DFLASH_VERIFY.host_lens(case) == [6, 4]  # the host mirror already counts the block
    assert DFLASH_VERIFY.host_lens(case.model_copy(update=dict(host_mirrors="gpu_only"))) == [9, 7]


def test_dflash_draft_sees_the_whole_block():
    """The draft's layers are ENCODER_ONLY: every block token sees all of the block."""
    case = spec(prefix_lens=[2], input_lens=3, num_steps=1)
    (step,) = DFLASH_DRAFT.steps(case)
    assert visible(step) == [(0, (0, 1, 2, 3, 4))] * 3
    assert step.writes == [(0, 2), (0, 3), (0, 4)]
    assert DFLASH_DRAFT.attn_type == "ENCODER_ONLY" and DFLASH_VERIFY.attn_type == "DECODER"


@pytest.mark.parametrize("release,page,reserved", [("0.5.17", 16, 13), ("0.5.18", 1, 13),
                                                   ("0.5.19", 16, 16), ("0.5.23", 1, 13), ("0.5.23", 4, 16)])
def test_dflash_reservation_per_release(release, page, reserved):
    """prefix 5, block 4: committed + 2 x block, rounded up to whole pages from 0.5.19."""
    assert dflash_verify.RESERVED_LEN.at(release)(5, 4, page) == reserved


def test_frozen_kv_mtp_draft_rows_read_the_prefix_only():
    """topk 2, 2 steps: two forwards, each with topk rows a request that see its prefix and write nothing."""
    case = spec(bs=2, prefix_lens=[3, 1], topk=2, num_steps=2)
    steps = FROZEN_KV_MTP_DRAFT.steps(case)
    assert len(steps) == 2
    for step in steps:
        assert visible(step) == [(0, (0, 1, 2)), (0, (0, 1, 2)), (1, (0,)), (1, (0,))]
        assert step.writes == []
    assert FROZEN_KV_MTP_DRAFT.row_lens(case) == [3, 1]
    assert FROZEN_KV_MTP_DRAFT.rows_per_request(case) == 2 and FROZEN_KV_MTP_DRAFT.tokens_per_request(case) == 1


def test_frozen_kv_mtp_verify_is_eagles_verify():
    case = spec(prefix_lens=[2], topk=2, input_lens=5, seed=3)
    assert visible(FROZEN_KV_MTP_VERIFY.steps(case)[0]) == visible(TARGET_VERIFY.steps(case)[0])
    assert FROZEN_KV_MTP_VERIFY.custom_mask(case).equal(TARGET_VERIFY.custom_mask(case))


# --- the model's sliding window (HF: a query at position p sees keys k with p - k < sliding_window) ---

def test_target_verify_chain_in_a_sliding_window():
    """prefix 5, window 3: the token at position 5 + t sees positions 3 + t .. 5 + t."""
    (step,) = TARGET_VERIFY.steps(spec(prefix_lens=[5], input_lens=4, sliding_window=3))
    assert visible(step) == [(0, (3, 4, 5)), (0, (4, 5, 6)), (0, (5, 6, 7)), (0, (6, 7, 8))]


def test_target_verify_tree_window_counts_depth_not_rows(monkeypatch):
    """Tree [-1, 0, 0, 1, 2] after a 2-token prefix, window 3: node n sits at row 2 + n but at
    position 2 + its depth (0, 1, 1, 2, 2). Node 4 (row 6, position 4) keeps its root (row 2,
    position 2) and parent (row 4); counted by rows, the root would fall out of the window."""
    monkeypatch.setattr(target_verify, "draft_tree", lambda case, request: TREE)
    (step,) = TARGET_VERIFY.steps(spec(prefix_lens=[2], topk=2, input_lens=5, sliding_window=3))
    assert visible(step) == [(0, (0, 1, 2)), (0, (1, 2, 3)), (0, (1, 2, 4)), (0, (2, 3, 5)), (0, (2, 4, 6))]
    # the tree mask backends get is the tree's, with no window in it (the window is the layer's)
    unwindowed = spec(prefix_lens=[2], topk=2, input_lens=5)
    assert torch.equal(TARGET_VERIFY.custom_mask(spec(prefix_lens=[2], topk=2, input_lens=5, sliding_window=3)),
                       TARGET_VERIFY.custom_mask(unwindowed))


def test_ngram_verify_window_counts_depth_not_rows(monkeypatch):
    """parents [-1, 0, 1, 1, 3] after 1 token, window 2: node 4 (row 5, depth 3, position 4) sees
    its parent node 3 (row 4, position 3) and itself."""
    monkeypatch.setattr(type(NGRAM_VERIFY), "tree", lambda self, case, request: [-1, 0, 1, 1, 3])
    (step,) = NGRAM_VERIFY.steps(spec(prefix_lens=[1], input_lens=5, sliding_window=2))
    assert visible(step) == [(0, (0, 1)), (0, (1, 2)), (0, (2, 3)), (0, (2, 4)), (0, (4, 5))]


def test_draft_extend_v2_in_a_sliding_window():
    (step,) = DRAFT_EXTEND_V2.steps(spec(prefix_lens=[4], input_lens=3, sliding_window=2))
    assert visible(step) == [(0, (3, 4)), (0, (4, 5)), (0, (5, 6))]


@pytest.mark.parametrize("window, step1_branch1", [(2, (7, 8)), (3, (3, 7, 8))])
def test_draft_decode_window_counts_steps_not_rows(window, step1_branch1):
    """prefix 4, topk 2: branch 1's token of step s sits at row 7 + s but at position 4 + s."""
    step0, step1 = DRAFT_DECODE.steps(spec(prefix_lens=[4], topk=2, sliding_window=window))
    oldest = 4 - window + 1  # the first prefix position step 0 (position 4) keeps
    assert visible(step0) == [(0, (*range(oldest, 4), 4)), (0, (*range(oldest, 4), 7))]
    assert visible(step1)[1] == (0, step1_branch1)


@pytest.mark.parametrize("mode", [TARGET_VERIFY, DRAFT_EXTEND_V2, DRAFT_DECODE], ids=lambda mode: mode.name)
def test_a_window_over_every_row_changes_nothing(mode):
    fields = dict(bs=2, prefix_lens=[7, 3], topk=2)
    if mode is not DRAFT_DECODE:
        fields["input_lens"] = 5
    wide, full = spec(**fields, sliding_window=64), spec(**fields)
    assert [visible(step) for step in mode.steps(wide)] == [visible(step) for step in mode.steps(full)]


def test_draft_decode_paged_tree_branches_own_pages():
    """prefix 5, page 4, topk 2, 3 steps: the tail is 1 token, each branch owns ceil((1 + 3) / 4) = 1
    page from the prefix's last page boundary (4): branch 0 at 5..7, branch 1 at 9..11, whose hole 8
    holds a copy of the tail (position 4)."""
    case = spec(prefix_lens=[5], topk=2, page_size=4)
    step0, step1 = DRAFT_DECODE.steps(case)
    assert visible(step0) == [(0, (0, 1, 2, 3, 4, 5)), (0, (0, 1, 2, 3, 4, 9))]
    assert step0.writes == [(0, 5), (0, 9)]
    assert visible(step1) == [(0, (0, 1, 2, 3, 4, 5, 6)), (0, (0, 1, 2, 3, 4, 9, 10))]
    assert DRAFT_DECODE.row_lens(case) == [12]
    assert DRAFT_DECODE.tail_copies(case, 0) == ([8], [4])


def test_draft_decode_paged_tree_at_a_page_boundary_has_no_holes():
    case = spec(prefix_lens=[8], topk=3, page_size=4)  # tail 0: one page of 3 steps per branch
    assert [DRAFT_DECODE.branch_start(case, 0, k) for k in range(3)] == [8, 12, 16]
    assert DRAFT_DECODE.row_lens(case) == [20]
    assert DRAFT_DECODE.tail_copies(case, 0) == ([], [])
