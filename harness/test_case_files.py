"""Case files: the shipped matrix loads, sweeps expand, and bad files say what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cases import CaseFileError, load_all_cases, load_case_file
from harness.modes import MODES

BAD = Path(__file__).parent / "testdata" / "bad_cases"

# file -> fragments the single error line must contain (file, case, field, what is valid)
EXPECTED_ERRORS = {
    "unknown_key.yaml": ["case 'typo'", "field 'prefx_len'", "unknown field; valid fields:"],
    "wrong_type.yaml": ["case 'bs-is-text'", "field 'bs'", "valid integer"],
    "prefix_len_mismatch.yaml": ["case 'short-prefix'", "field 'prefix_lens'", "has 2 entries but bs is 3"],
    "negative_length.yaml": ["case 'negative'", "field 'prefix_lens'", "lengths must be >= 0"],
    "topk_mode_cannot_take.yaml": ["case 'chain-window-wrong'", "field 'input_lens'",
                                   "num_steps + 1 = 4 tokens, got 7"],
    "syntax_error.yaml": ["YAML syntax error at line"],
    "sweep_bad.yaml": ["case #1 ('swept')", "field 'sweep'", "lists of values"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_ERRORS))
def test_bad_case_file_gives_one_clear_error(name):
    with pytest.raises(CaseFileError) as error:
        load_case_file(BAD / name)
    message = str(error.value)
    assert message.startswith(str(BAD / name)), message
    assert "\n" not in message, message
    for fragment in EXPECTED_ERRORS[name]:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_shipped_matrix_loads_with_unique_ids():
    cases = load_all_cases()
    ids = [case.case_id for case in cases]
    assert len(ids) == len(set(ids))
    assert {case.mode for case in cases} == set(MODES)  # every registered mode ships cases


def test_sweep_and_variants_expand_to_named_cases(tmp_path):
    path = tmp_path / "swept.yaml"
    path.write_text(
        "mode: draft_decode\n"
        "cases:\n"
        "  - name: dd\n"
        "    bs: 1\n"
        "    prefix_lens: [5]\n"
        "    sweep: {topk: [1, 2], dtype: [float32, float16]}\n"
        "    variants:\n"
        "      - {name: small}\n"
        "      - {name: wide, bs: 2, prefix_lens: [5, 40]}\n"
    )
    cases = load_case_file(path)
    names = [case.spec.name for case in cases]
    assert len(names) == 8
    assert "dd-wide-topk2-dtypefloat16" in names
    wide = next(case for case in cases if case.spec.name == "dd-wide-topk1-dtypefloat32")
    assert wide.spec.prefix_lens == [5, 40]


def test_scalar_lengths_repeat_per_request(tmp_path):
    path = tmp_path / "scalar.yaml"
    path.write_text("mode: target_verify\ncases:\n  - {name: c, bs: 3, prefix_lens: 9, input_lens: 4}\n")
    (case,) = load_case_file(path)
    assert case.spec.prefix_lens == [9, 9, 9] and case.spec.input_lens == [4, 4, 4]
