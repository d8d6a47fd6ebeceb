"""Case traits (harness/case/case_traits.py): each rule holds exactly where the state it names is, and
the ledger and the generator select on it."""

import pytest

from harness.base.case_spec import Case, CaseSpec
from harness.case.case_traits import FLASHINFER_WORKSPACE_BYTES, TRAITS, flashinfer_graph_split_kv_bytes, traits_of
from harness.case.cases import fields_of, load_all_cases
from harness.search.generated import _known_to_fail
from harness.ledger.known_failures import load_known_failures


def verify(prefix: int, window: int, context_len: int = 4096) -> Case:
    spec = CaseSpec(name="wall", prefix_lens=[prefix, 3], input_lens=[window, window], num_steps=window - 1,
                    context_len=context_len, runners=["eager"], backends=["fa3"], dtype="bfloat16")
    return Case(mode="target_verify", spec=spec, source="test")


@pytest.mark.parametrize("prefix, expected", [(4088, ()), (4089, ("past-context",))],
                         ids=["last-key-at-the-wall", "one-key-past"])
def test_past_context_starts_one_key_past_the_model_context(prefix, expected):
    """A verify of 8 tokens reads prefix + 8 keys: 4096 still fit a model of 4096, 4097 do not."""
    assert traits_of(verify(prefix, 8)) == expected


def test_the_hand_matrix_cases_with_the_trait_are_those_written_for_it():
    """The hand cases that put a row past the context were named for it when the finding was made,
    independently of this rule: the rule must find exactly those."""
    cases = load_all_cases()
    assert {case.case_id for case in cases if "past-context" in traits_of(case)} == \
        {case.case_id for case in cases if "past-context" in case.spec.name}


def extend(window: int, extend_tokens: int) -> Case:
    spec = CaseSpec(name="swa", prefix_lens=[9, 3], input_lens=[extend_tokens, 2], sliding_window=window,
                    runners=["eager"], backends=["triton"], dtype="bfloat16")
    return Case(mode="draft_extend_v2", spec=spec, source="test")


@pytest.mark.parametrize("window, extend_tokens, expected", [
    (3, 3, ()), (3, 4, ("window-inside-extend",)), (0, 8, ())],
    ids=["extend-fills-the-window", "one-extend-token-past-it", "no-window"])
def test_window_inside_extend_starts_when_an_extend_token_sees_past_the_window(window, extend_tokens, expected):
    """With W extend tokens the first one is still inside the last one's window; with W + 1 it is not."""
    assert traits_of(extend(window, extend_tokens)) == expected


def wide_verify(capture_bs: int) -> Case:
    spec = CaseSpec(name="wide", prefix_lens=[5] * 8, input_lens=[7] * 8, num_steps=6, num_heads=64,
                    num_kv_heads=8, head_dim=256, runners=["cuda_graph"], capture_bs=[capture_bs],
                    pad_styles=["small_real"], backends=["flashinfer"], dtype="bfloat16")
    return Case(mode="target_verify", spec=spec, source="test")


def test_the_graph_workspace_figure_is_what_flashinfer_asked_for_on_the_gpu():
    """FlashInfer 0.6.15 on an H200 refused batch_prefill_tmp_v of 499122176 bytes for the hand case
    (capture bs 64) and 1035993088 for gen41-407 (bs 132); the rule adds tmp_s (a head_dim's 257th)."""
    cases = {case.spec.name: case for case in load_all_cases()}
    assert flashinfer_graph_split_kv_bytes(cases["graph-workspace-b60k1s6p1d256h64x8"]) == 499122176 // 256 * 257
    assert flashinfer_graph_split_kv_bytes(cases["graph-workspace-gen41-407-b131k1s6p64d256h64x8"]) == \
        1035993088 // 256 * 257


@pytest.mark.parametrize("capture_bs, expected", [(48, ()), (64, ("flashinfer-graph-workspace",))])
def test_the_graph_workspace_trait_holds_past_sglangs_fixed_workspace(capture_bs, expected):
    assert (flashinfer_graph_split_kv_bytes(wide_verify(capture_bs)) > FLASHINFER_WORKSPACE_BYTES) == bool(expected)
    assert traits_of(wide_verify(capture_bs)) == expected


def test_every_trait_says_why():
    assert all(trait.why and name == trait.name for name, trait in TRAITS.items())


def test_the_generator_passes_over_a_draw_a_known_failure_covers_by_trait(tmp_path):
    ledger = tmp_path / "KNOWN_FAILURES.md"
    ledger.write_text("## KF-rows-past-context\n- backend: fa3\n- mode: *\n- runner: *\n- cases: `gen*`\n"
                      "- traits: past-context\n- reason: x\n- upstream: sglang#1\n- class: crash\n")
    known = load_known_failures(ledger)

    class Drawn:
        mode = "target_verify"

        def __init__(self, prefix):
            self.fields = fields_of(verify(prefix, 8).spec)

    assert _known_to_fail(Drawn(4089), "gen1-0-x", known)
    assert not _known_to_fail(Drawn(4088), "gen1-0-x", known)


def served_mla(mode: str, name: str, **update) -> Case:
    """A hand MLA case at page 64 (cases/mla), with fields changed."""
    (case,) = [case for case in load_all_cases() if case.mode == mode and case.spec.name == f"{name}-dtypebfloat16"]
    return Case(mode, case.spec.model_copy(update=update), "test")


@pytest.mark.parametrize("case, expected", [
    (lambda: served_mla("target_verify", "mla-served-chain-dsv3-tp8"), ()),
    (lambda: served_mla("target_verify", "mla-served-chain-dsv3-tp8", num_steps=4, input_lens=[5] * 4),
     ("fa3-mla-paged-tma-tail",)),
    (lambda: served_mla("target_verify", "mla-served-chain-dsv3-tp8", num_steps=4, input_lens=[5] * 4,
                        prefix_lens=[123, 59, 635, 59]), ()),
    (lambda: served_mla("target_verify", "mla-served-chain-dsv3-tp8", num_steps=4, input_lens=[5] * 4,
                        page_size=16), ()),
    (lambda: served_mla("draft_decode", "mla-served-kimi-dp"), ()),
    (lambda: served_mla("draft_decode", "mla-served-kimi-dp", num_heads=128), ("fa3-mla-paged-tma-tail",)),
    (lambda: served_mla("draft_decode", "mla-served-kimi-dp", num_heads=128, topk=2), ()),
], ids=["16-heads-x-4-tokens-fill-one-tile", "x-5-tokens-pass-it", "every-last-page-full", "page-16-no-tma",
        "draft-decode-64-heads", "draft-decode-128-heads", "paged-tree-draft-reads-whole-pages"])
def test_the_fa3_mla_tma_tail_holds_past_64_rows_with_a_partial_last_page(case, expected):
    """FA3 loads paged MLA K/V by TMA once a request's query tokens x heads pass its 64-row tile at page 64;
    only a partly written last page then shows. The scale tier on an H200 gave NaN in exactly the 20 of its
    44 page-64 fa3_mla verdicts where this holds (KF-fa3-mla-paged-tma-page-tail), e.g. 16 heads x 5 tokens,
    and passed 61 + 3 tokens (a full page) and a topk-6 draft decode."""
    assert traits_of(case()) == expected
