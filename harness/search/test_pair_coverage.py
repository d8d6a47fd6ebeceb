"""Every pair of axis values a backend x mode can have meets in at least one cell of the matrix.

harness/search/pair_coverage.py says what the axes are, which pairs each backend x mode can have (the
mode's rules, its backend entry's and the runner forms' refusals, sglang's host-mirror decision)
and which the cells of cases/*.yaml cover, wherever they run. The first test fails naming the
backend, the mode and each pair left without a cell; the others show that it can, and that what
counts as possible follows the entries.
"""

from __future__ import annotations

import shutil

import pytest

from harness.base import releases
from harness.case.cases import CASES_DIR, load_all_cases
from harness.cell.cell_matrix import expand_cells
from harness.families import family_of_backend
from harness.search.pair_coverage import Prober, cell_key, coverage, show_pair, uncovered_lines

HOW_TO_COVER = "`python -m harness.search.pair_cover` proposes case variants that cover them"


@pytest.fixture(scope="module")
def prober() -> Prober:
    return Prober()


@pytest.fixture(scope="module")
def table(prober):
    return {(entry.backend, entry.mode): entry for entry in coverage(load_all_cases(), prober)}


def test_every_possible_pair_has_a_cell(table):
    """Required of the dense family; MLA's uncovered pairs are listed in COVERAGE.md, not yet required
    (its hand cases are a first matrix, issue 40)."""
    missing = uncovered_lines([entry for entry in table.values() if family_of_backend(entry.backend) == "dense"])
    assert not missing, (f"{len(missing)} possible pair(s) of axis values have no cell:\n  "
                         + "\n  ".join(missing) + f"\n{HOW_TO_COVER}")


def test_a_missing_case_leaves_its_pairs_named(tmp_path, prober):
    """The matrix without target_verify's float16 cases: the pairs only they covered are named, by backend and mode."""
    for path in CASES_DIR.glob("*.yaml"):
        shutil.copy(path, tmp_path)
    verify = tmp_path / "target_verify.yaml"
    text = verify.read_text()
    start = text.index("  - name: pairs-fp16\n")
    end = text.index("  - name: ", start + 1)
    verify.write_text(text[:start] + text[end:])
    missing = uncovered_lines(coverage(load_all_cases(tmp_path), prober))
    assert "triton x target_verify: host_mirrors=gpu_only x dtype=float16" in missing
    assert "fa3 x target_verify: runner=cuda_graph x dtype=float16" in missing
    assert all(line.split(": ")[0].endswith(" x target_verify") for line in missing)  # no other mode lost one


def test_no_two_cells_are_the_same_work():
    """Twins would cover nothing new and cost a run each: cells differ beyond their names."""
    seen: dict = {}
    for cell in expand_cells(load_all_cases()):
        first = seen.setdefault(cell_key(cell), cell.cell_id)
        assert first == cell.cell_id, f"{cell.cell_id} is the same cell as {first} under another name"


def _possible(table, backend: str, mode: str, *values: tuple[str, str]) -> bool:
    entry = table.get((backend, mode))
    return entry is not None and tuple(values) in entry.possible


@pytest.mark.parametrize("backend, mode, pair, expected", [
    ("triton", "draft_decode", (("page_size", ">1"), ("topk", ">1")), True),  # the paged tree
    ("fa3", "draft_decode", (("page_size", ">1"), ("topk", ">1")), True),
    ("fa4", "draft_decode", (("page_size", ">1"), ("topk", ">1")), False),  # sglang's _PAGE_TREE_SPEC_BACKENDS
    ("fa3", "target_verify", (("host_mirrors", "full"), ("dtype", "float32")), False),  # FA3 takes fp16/bf16
    ("triton", "target_verify", (("runner", "eager"), ("padding", "nopad")), False),  # eager pads nothing
    ("triton", "target_verify", (("runner", "cg_meta"), ("padding", "small_real")), True),
    ("flashinfer", "draft_extend_v2", (("runner", "cg_meta"), ("dtype", "bfloat16")), False),  # not cg_meta-exact
    ("triton", "ngram_verify", (("host_mirrors", "gpu_only"), ("dtype", "float32")), False),  # NGRAM keeps mirrors
    ("triton", "draft_extend_v2", (("host_mirrors", "gpu_only"), ("dtype", "float32")), True),
    ("triton", "draft_decode", (("host_mirrors", "none"), ("draft_window", "window+sink")), "0.5.21"),
    ("fa3", "draft_decode", (("host_mirrors", "full"), ("draft_window", "window")), False),  # FA3 ignores the window
])
def test_what_is_possible_follows_the_entries_and_sglang(table, backend, mode, pair, expected):
    """``expected`` a release: possible from that release on (the contracts of the installed one apply)."""
    if isinstance(expected, str):
        expected = releases.version_key(releases.installed().contracts) >= releases.version_key(expected)
    assert _possible(table, backend, mode, *pair) == expected, f"{backend} x {mode}: {show_pair(pair)}"


def test_torch_native_runs_no_graph_and_no_draft_decode(table):
    assert ("torch_native", "draft_decode") not in table  # no multi-step class: no pair at all
    entry = table[("torch_native", "draft_extend_v2")]
    assert not {value for pair in entry.possible for value in pair if value[0] in ("runner", "padding")} - {
        ("runner", "eager")}
