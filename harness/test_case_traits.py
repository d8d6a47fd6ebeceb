"""Case traits (harness/case_traits.py): each rule holds exactly where the state it names is, and
the ledger and the generator select on it."""

import pytest

from harness.case_spec import Case, CaseSpec
from harness.case_traits import TRAITS, traits_of
from harness.cases import fields_of, load_all_cases
from harness.generated import _known_to_fail
from harness.known_failures import load_known_failures


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
