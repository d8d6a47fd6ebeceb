"""Case files: the shipped matrix loads, sweeps expand, and every bad file says what is wrong.

testdata/bad_cases/ is a corpus of files a new user's typo or a hostile file would look like.
Each must fail with exactly one line that starts with the file's path and holds the fragments
below (which case, which field, what would be valid); none may load, raise anything but
CaseFileError, or print a traceback.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from harness.case.case_limits import CELL_MEMORY_ENV, MAX_CASES_ENV
from harness.case.case_yaml import MAX_FILE_BYTES
from harness.case.cases import CaseFileError, load_all_cases, load_case_file
from harness.modes import MODES

BAD = Path(__file__).parent.parent / "testdata" / "bad_cases"
SAFE_NAME = "use 1 to 48 letters, digits, '-' or '_'"
GRAPH_BS = "captures decode CUDA graphs for at most 512 requests"
NO_COERCION = "expected a whole number, got"

# file -> fragments its one error line must hold, grouped by the class of mistake.
EXPECTED_ERRORS = {
    # YAML syntax and file structure
    "syntax_error.yaml": ["YAML syntax error at line 5, column 16", "expected ',' or ']'"],
    "syntax_tab_indent.yaml": ["YAML syntax error at line 4, column 1", "'\\t' that cannot start any token"],
    "syntax_unclosed_quote.yaml": ["YAML syntax error at line 5", "unexpected end of stream"],
    "two_documents.yaml": ["a second YAML document starts at line 7", "a case file is one document"],
    "python_tag.yaml": ["python/object/apply:os.system' at line 3", "plain mappings, lists, numbers and text"],
    "deep_nesting.yaml": ["nested too deeply"],
    "alias_bomb.yaml": ["case 'c'", "field 'prefix_lens'", f"item 1: {NO_COERCION} [[...]"],
    "empty_file.yaml": ["holds no YAML", "'mode', 'cases' and optionally 'defaults'"],
    "comments_only.yaml": ["holds no YAML (empty, or only comments)"],
    "top_level_list.yaml": ["expected a mapping with 'mode', 'cases'", "(a list)"],
    "top_level_text.yaml": ["expected a mapping with 'mode', 'cases'", "got 'target_verify' (text)"],
    "missing_mode.yaml": ["field 'mode': required"],
    "unknown_mode.yaml": ["field 'mode'", "got 'target_verfy'", "valid: 'target_verify', ", " or 'draft_decode'"],
    "unknown_top_key.yaml": ["field 'case'", "did you mean 'cases'?", "valid fields: mode, family, defaults, cases"],
    "cases_not_list.yaml": ["field 'cases'", "expected a list, got {"],
    "case_not_mapping.yaml": ["case #1", "expected a mapping of fields, got 'chain-bs2' (text)"],
    "defaults_not_mapping.yaml": ["field 'defaults'", "expected a mapping of fields", "(a list)"],
    "missing_name.yaml": ["case #1 (no name)", "field 'name'", "required"],
    "missing_bs.yaml": ["case 'c'", "field 'bs': required"],
    # unknown fields
    "unknown_key.yaml": ["case #1 ('typo')", "field 'prefx_len'", "did you mean 'prefix_lens'?", "valid fields:"],
    "unknown_key_in_defaults.yaml": ["defaults", "field 'num_head'", "did you mean 'num_heads'?"],
    "name_in_defaults.yaml": ["defaults", "field 'name'", "each case names itself"],
    # types: nothing is coerced
    "wrong_type.yaml": ["case 'bs-is-text'", "field 'bs'", f"{NO_COERCION} 'two' (text)"],
    "int_as_quoted_text.yaml": ["field 'bs'", f"{NO_COERCION} '2'", "write numbers without quotes"],
    "int_as_decimal.yaml": ["field 'num_steps'", f"{NO_COERCION} 3.0 (a decimal number)"],
    "int_as_boolean.yaml": ["field 'topk'", f"{NO_COERCION} true (true/false)"],
    "int_as_date.yaml": ["field 'seed'", f"{NO_COERCION} 2026-11-22 (a date)"],
    "int_as_null.yaml": ["field 'bs'", f"{NO_COERCION} nothing (null)"],
    "list_item_text.yaml": ["field 'prefix_lens'", f"item 2: {NO_COERCION} '9'"],
    "list_as_text.yaml": ["field 'backends'", "expected a list, got 'triton' (text)"],
    "choice_misspelt.yaml": ["field 'dtype'", "got 'fp32'", "valid: 'float32', 'float16' or 'bfloat16'"],
    "choice_read_as_boolean.yaml": ["field 'host_mirrors'", "got false (true/false)", "valid: 'full', 'gpu_only'"],
    "name_not_text.yaml": ["case #1 (12)", "field 'name'", "expected text, got 12"],
    # sizes no backend or machine serves
    "negative_length.yaml": ["case 'negative'", "field 'prefix_lens'", "item 2: -1 is below 0"],
    "bs_too_large.yaml": ["field 'bs'", "100,000 is over 1,024", "scale tier's largest batch"],
    "prefix_too_long.yaml": ["field 'prefix_lens'", "item 2: 10,000,000 is over 262,400"],
    "context_len_too_large.yaml": ["field 'context_len'", "is over 263,168"],
    "window_too_long.yaml": ["field 'input_lens'", "5,000 is over 256", "speculative_num_draft_tokens"],
    "topk_too_large.yaml": ["field 'topk'", "64 is over 8"],
    "num_steps_too_large.yaml": ["field 'num_steps'", "100 is over 16"],
    "page_size_too_large.yaml": ["field 'page_size'", "1,024 is over 128", "largest page any sglang backend"],
    "page_size_zero.yaml": ["field 'page_size'", "0 is below 1 (valid: 1..128)"],
    "heads_too_many.yaml": ["field 'num_heads'", "4,096 is over 128"],
    "heads_not_multiple.yaml": ["field 'num_heads'", "6 is not a multiple of num_kv_heads 4"],
    "head_dim_too_large.yaml": ["field 'head_dim'", "4,096 is over 256", "FA3 takes head dims up to 256"],
    "head_dim_not_multiple.yaml": ["field 'head_dim'", "100 is not a multiple of 8"],
    "seed_too_large.yaml": ["field 'seed'", "is over 4,294,967,295"],
    "capture_bs_too_large.yaml": ["field 'capture_bs'", "item 2: 4,096 is over 512", GRAPH_BS],
    "capture_bs_below_bs.yaml": ["field 'capture_bs'", "must each be >= bs 3"],
    "default_capture_too_large.yaml": ["field 'capture_bs'", "left out, it is bs, 2 x bs, 4 x bs = [200, 400, 800]"],
    "context_shorter_than_row.yaml": ["field 'prefix_lens'", "item 2 is 37, a committed length production never "
                                      "reaches with context_len 16", "max_req_len - ", " + 4 = 1"],
    "draft_extend_past_the_wall.yaml": ["case 'c'", "field 'prefix_lens'", "item 1 is 4096, a committed length "
                                        "production never reaches with context_len 4096", " + 3 = 409",
                                        "min(num_steps + 1, draft tokens)", "give prefixes <= 409"],
    "memory_over_budget.yaml": ["field 'prefix_lens'", "needs about 123.6 GiB", "KV pool", "may take 4.0 GiB"],
    "graph_buffers_over_budget.yaml": ["field 'capture_bs'", "CUDA-graph kv_indices", "make capture_bs smaller"],
    "prefix_len_mismatch.yaml": ["case 'short-prefix'", "field 'prefix_lens'", "has 2 entries but bs is 3"],
    # duplicates
    "duplicate_key_top_level.yaml": ["field 'mode': appears twice (lines 1 and 2)", "keep only the last value"],
    "duplicate_key_in_defaults.yaml": ["defaults", "field 'num_heads': appears twice (lines 3 and 5)"],
    "duplicate_key_in_case.yaml": ["case #1 ('c')", "field 'bs': appears twice (lines 4 and 7)"],
    "duplicate_key_in_sweep.yaml": ["case #1 ('c')", "field 'sweep.dtype': appears twice (lines 8 and 9)"],
    "duplicate_case_name.yaml": ["case 'c'", "field 'name'", "duplicate case name (also made by case #1 ('c'))"],
    "duplicate_backend.yaml": ["field 'backends'", "lists 'triton' twice"],
    "duplicate_capture_size.yaml": ["field 'capture_bs'", "lists 4 twice"],
    # sweeps
    "sweep_bad.yaml": ["case #1 ('swept')", "field 'sweep.topk'", "expected a list of values"],
    "sweep_not_mapping.yaml": ["field 'sweep'", "expected a mapping of field -> list of values"],
    "sweep_empty_mapping.yaml": ["field 'sweep'", "is empty"],
    "sweep_empty_list.yaml": ["field 'sweep.dtype'", "empty list, so the sweep makes no cases"],
    "sweep_unknown_field.yaml": ["field 'sweep.dtyp'", "did you mean 'dtype'?"],
    "sweep_over_name.yaml": ["field 'sweep.name'", "cannot be swept"],
    "sweep_bad_value.yaml": ["case 'c-dtypefp8'", "field 'dtype'", "got 'fp8'"],
    "sweep_repeated_value.yaml": ["field 'sweep.seed'", "lists 1 twice"],
    "sweep_nested_value.yaml": ["field 'sweep.prefix_lens'", "numbers, text or flat lists"],
    "sweep_in_defaults_bad.yaml": ["case 'c-dtypefloat64'", "field 'dtype'", "got 'float64'"],
    "sweep_huge.yaml": ["field 'sweep'", "expands to 120,000 cases (100 x 40 x 30)",
                        f"set {MAX_CASES_ENV}=120000"],
    # variants
    "variants_not_list.yaml": ["field 'variants'", "expected a list of field -> value maps"],
    "variants_empty.yaml": ["field 'variants'", "is an empty list"],
    "variant_not_mapping.yaml": ["field 'variants[0]'", "expected a mapping of field overrides"],
    "variants_unnamed.yaml": ["field 'variants[0]'", "each needs a name"],
    "variant_with_sweep.yaml": ["field 'variants[0].sweep'", "cannot hold a sweep or variants"],
    "variant_unknown_field.yaml": ["field 'variants[1].bs_'", "did you mean 'bs'?"],
    "variant_repeated_name.yaml": ["field 'variants[1].name'", "'a' is also the name of variants[0]"],
    "variant_breaks_case.yaml": ["case 'c-wide'", "field 'prefix_lens'", "has 2 entries but bs is 3"],
    "variant_name_unsafe.yaml": ["field 'variants[0].name'", "'../up' is not a safe name ('.' is not allowed)"],
    # names safe in test ids and paths
    "name_with_slash.yaml": ["field 'name'", "('/' is not allowed)", SAFE_NAME],
    "name_with_space.yaml": ["field 'name'", "(' ' is not allowed)", SAFE_NAME],
    "name_dot_dot.yaml": ["field 'name'", "'..' is not a safe name ('.' is not allowed)", SAFE_NAME],
    "name_with_brackets.yaml": ["field 'name'", "('[' is not allowed)", SAFE_NAME],
    "name_with_colons.yaml": ["field 'name'", "(':' is not allowed)", SAFE_NAME],
    "name_too_long.yaml": ["field 'name'", "(60 characters)", SAFE_NAME],
    "name_empty.yaml": ["field 'name'", "(empty)", SAFE_NAME],
    # empty selections
    "cases_empty.yaml": ["field 'cases'", "is an empty list; give at least one case"],
    "backends_empty.yaml": ["field 'backends'", "would make no cells", "triton, flashinfer"],
    "runners_empty.yaml": ["field 'runners'", "would make no cells", "eager, cuda_graph, cg_meta"],
    "pad_styles_empty.yaml": ["field 'pad_styles'", "would make no cells", "prod_fill, small_real"],
    # encodings
    "utf16_with_bom.yaml": ["UTF-16 LE text", "byte-order mark FF FE", "save it as UTF-8"],
    "utf16_without_bom.yaml": ["NUL byte at offset 1", "UTF-16 text without a byte-order mark"],
    "utf32_with_bom.yaml": ["UTF-32 LE text", "FF FE 00 00"],
    "latin1.yaml": ["not UTF-8: byte 0xE9 at line 3, column 8", "save the file as UTF-8"],
    "binary.yaml": ["binary data: a NUL byte at offset 0"],
    "bom_inside.yaml": ["byte-order mark (U+FEFF) inside the file at line 7"],
    "control_character.yaml": ["control character U+0007 at line 3, column 12"],
    # the rules of each forward mode
    "topk_mode_cannot_take.yaml": ["case 'chain-window-wrong'", "field 'input_lens'", "num_steps + 1 = 4 tokens, got 7"],
    "verify_without_window.yaml": ["field 'input_lens'", "required (the verify window"],
    "verify_uneven_window.yaml": ["field 'input_lens'", "fixed window per request; got [4, 5]"],
    "verify_tree_window_too_big.yaml": ["field 'input_lens'", "tree holds 2..7 tokens, got 9"],
    "extend_without_window.yaml": ["field 'input_lens'", "required (the draft-extend window"],
    "draft_decode_with_window.yaml": ["field 'input_lens'", "drop input_lens"],
    "draft_decode_one_step.yaml": ["field 'num_steps'", "needs num_steps >= 2"],
    "draft_decode_prefix_zero.yaml": ["case 'c'", "field 'prefix_lens'", "item 2 is 0, a length production never "
                                      "reaches in draft decode", "give every request a prefix >= 1"],
    "draft_window_in_verify.yaml": ["field 'draft_window'", "only dflash_draft, draft_decode take draft_window"],
    "draft_sink_without_window.yaml": ["field 'draft_sink'", "only with a draft_window"],
    "draft_window_too_large.yaml": ["field 'draft_window'", "1,000,000 is over 262,144"],
    "ngram_with_topk.yaml": ["field 'topk'", "topk does not apply, leave it at 1"],
    "dflash_with_topk.yaml": ["field 'topk'", "DFlash verifies a chain", "leave topk at 1"],
    "dflash_without_mirrors.yaml": ["field 'host_mirrors'", "'none' is no state it produces"],
    "dflash_compact_prefix_too_long.yaml": ["case 'c'", "field 'prefix_lens'", "item 2 (9) is longer than a compact "
                                            "draft row keeps whole (8 with draft_window 8", "keep each prefix <= 8"],
    "dflash_compact_window_below_block.yaml": ["field 'draft_window'", "must be >= --speculative-num-draft-tokens",
                                               "4 < 8"],
    "frozen_draft_with_window.yaml": ["field 'input_lens'", "topk query rows per request; drop input_lens"],
    "frozen_draft_empty_prefix.yaml": ["field 'prefix_lens'", "at least 1 committed token"],
    # the model's sliding window
    "sliding_window_one.yaml": ["case 'c'", "field 'sliding_window'", "1 is a window sglang cannot serve",
                                "RadixAttention reads as no window", "give 0 (full attention) or at least 2"],
    "sliding_window_with_draft_window.yaml": ["case 'c'", "field 'sliding_window'",
                                              "takes sliding_window or draft_window / draft_sink, not both"],
    "sliding_window_too_large.yaml": ["case 'c'", "field 'sliding_window'", "1,000,000 is over 262,144"],
    # attention families (harness/families)
    "family_unknown.yaml": ["field 'family'", "got 'latent' (text); valid: 'dense' or 'mla'"],
    "family_per_case.yaml": ["case #1 ('c')", "field 'family'", "the file's, set once at its top beside 'mode'"],
    "mla_model_unknown.yaml": ["case 'c'", "field 'model'", "'deepseek-v4' is no served MLA model here",
                               "valid: deepseek-v3"],
    "mla_head_dim_given.yaml": ["case 'c'", "field 'head_dim'", "an MLA layer caches one latent head",
                                "576 for deepseek-v3", "leave head_dim out"],
    "mla_heads_not_a_share.yaml": ["case 'c'", "field 'num_heads'", "12 is not deepseek-v3's 128 heads",
                                   "[128, 64, 32, 16, 8] for TP 1..16"],
    "mla_dense_backend.yaml": ["case 'c'", "field 'backends'", "fa3 serve another attention family",
                               "the mla family's backends are triton_mla, flashinfer_mla, fa3_mla, flashmla"],
    "dense_with_model.yaml": ["case 'c'", "field 'model'", "names a served model of another attention family"],
    "kernel_path_unknown.yaml": ["case 'c'", "field 'kernel_path'", "'triton-two-splits' is none of triton-one-split"],
    "first_request_in_a_file.yaml": ["case #1 ('c')", "first_request"],
    "mla_frozen_kv_mtp.yaml": ["case 'c'", "field 'family'", "mla runs no frozen_kv_mtp_verify",
                               "frozen-KV MTP for Gemma 4's MTP draft only"],
}


def one_error_line(path: Path) -> str:
    with pytest.raises(CaseFileError) as error:
        load_case_file(path)
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message, message
    assert message.startswith(f"{path}: "), message
    return message


def test_every_corpus_file_has_an_expected_error():
    assert sorted(p.name for p in BAD.glob("*.yaml")) == sorted(EXPECTED_ERRORS)


@pytest.mark.parametrize("name", sorted(EXPECTED_ERRORS))
def test_bad_case_file_gives_one_clear_error(name):
    message = one_error_line(BAD / name)
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


GOOD = "mode: target_verify\ncases:\n  - {name: c, bs: 2, prefix_lens: [5, 9], input_lens: 4}\n"


def test_yaml_features_a_file_may_use_on_purpose(tmp_path):
    """A UTF-8 byte-order mark, CRLF line ends, anchors and << merges (a merged key is no duplicate)."""
    path = tmp_path / "shared.yaml"
    text = ("mode: target_verify\n"
            "cases:\n"
            "  - &base {name: a, bs: 2, prefix_lens: [5, 9], input_lens: 4}\n"
            "  - <<: *base\n"
            "    name: b\n")
    path.write_bytes(codecs.BOM_UTF8 + text.replace("\n", "\r\n").encode())
    assert [case.spec.name for case in load_case_file(path)] == ["a", "b"]


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(GOOD + "# padding\n" * (MAX_FILE_BYTES // 10))
    assert "larger than 1 MiB" in one_error_line(path)


def test_the_case_cap_is_raised_on_purpose(tmp_path, monkeypatch):
    path = tmp_path / "sweep.yaml"
    path.write_text(GOOD.replace("input_lens: 4}", "input_lens: 4, sweep: {seed: [1, 2, 3]}}"))
    monkeypatch.setenv(MAX_CASES_ENV, "2")
    assert "expands to 3 cases (3), over the limit of 2 cases per file" in one_error_line(path)
    monkeypatch.setenv(MAX_CASES_ENV, "3")
    assert len(load_case_file(path)) == 3
    monkeypatch.setenv(MAX_CASES_ENV, "lots")
    assert f"{MAX_CASES_ENV}='lots': expected a whole number of cases" in one_error_line(path)


def test_the_cell_memory_budget_is_raised_on_purpose(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text((BAD / "memory_over_budget.yaml").read_text())
    assert "may take 4.0 GiB" in one_error_line(path)
    monkeypatch.setenv(CELL_MEMORY_ENV, "200")
    assert len(load_case_file(path)) >= 1
    monkeypatch.setenv(CELL_MEMORY_ENV, "lots")
    assert f"{CELL_MEMORY_ENV}='lots': expected a whole number of GiB" in one_error_line(path)


def test_case_ids_are_unique_across_files(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(CaseFileError, match=r"b\.yaml: case 'c': field 'name': its id target_verify-c "
                                            r"is also made by .*a\.yaml"):
        load_all_cases(tmp_path)


@pytest.fixture
def folders(tmp_path):
    """A file where a folder belongs, and a folder of *.yml files."""
    (tmp_path / "file.yaml").write_text(GOOD)
    (tmp_path / "yml").mkdir()
    (tmp_path / "yml" / "a.yml").write_text(GOOD)
    return tmp_path


@pytest.mark.parametrize("folder, expected", [
    ("missing", "missing: not a folder"),
    ("file.yaml", "file.yaml: not a folder"),
    ("yml", "no *.yaml case files found (a.yml: rename to .yaml)"),
])
def test_cases_folder_problems(folders, folder, expected):
    with pytest.raises(CaseFileError) as error:
        load_all_cases(folders / folder)
    assert expected in str(error.value) and "\n" not in str(error.value)
