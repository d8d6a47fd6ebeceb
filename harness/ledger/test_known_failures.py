"""The KNOWN_FAILURES.md ledger: what parses, what is refused with which message, what matches, and
which failures of a covered cell its signature admits."""

import re

import pytest

from harness import ROOT
from harness.ledger.failure_class import DETECTORS, FAILURE_CLASSES, Failure
from harness.ledger.known_failures import (left_out_known, ErrorRange, InsideSignature, KnownFailuresError, OutsideSignature,
                                    load_known_failures, match, stale)
from harness.runners import RUNNER_NAMES as RUNNERS
from harness.base.results import LEFT_OUT_HERE

REPO_LEDGER = ROOT / "KNOWN_FAILURES.md"

ENTRY = """\
## KF-fa4-tree-graph
- backend: fa4
- mode: target_verify
- runner: cuda_graph
- cases: `*-tree-*`, chain-bs1
- reason: tree mask read past the padded rows
  after graph replay
- upstream: sglang#12345
- class: numeric
- max_abs_err: 0.2-0.3, margin x2
- evidence: reports/SUMMARY.md 2026-11-22, max_abs_err 0.3

Prose may follow:
- even bullets: like this one
"""

SECOND = """\
## KF-any-triton
- backend: tri*
- mode: *
- runner: *
- cases: *
- reason: everything on triton
- upstream: https://github.com/sgl-project/sglang/issues/1
- class: crash
"""


def cell(**fields):
    base = {"cell_id": "target_verify-tree-bs3-topk2-fa4-cuda_graph", "case": "tree-bs3-topk2",
            "backend": "fa4", "mode": "target_verify", "runner": "cuda_graph"}
    return {**base, **fields}


def write(tmp_path, text):
    path = tmp_path / "KNOWN_FAILURES.md"
    path.write_text(text)
    return path


def test_repo_ledger_parses():
    load_known_failures(REPO_LEDGER)  # the shipped file, with its fenced example, must stay valid


def test_zero_entries(tmp_path):
    assert load_known_failures(write(tmp_path, "# Known failures\n\nNothing here.\n")) == []


def test_entry_fields(tmp_path):
    header = "# Known failures\n\n```markdown\n## not-an-entry\n- backend: x\n```\n\n"
    [entry, other] = load_known_failures(write(tmp_path, header + ENTRY + "\n" + SECOND))
    assert entry.id == "KF-fa4-tree-graph"
    assert entry.cases == ("*-tree-*", "chain-bs1")
    assert entry.reason == "tree mask read past the padded rows after graph replay"
    assert entry.upstream == "sglang#12345"
    assert entry.evidence.startswith("reports/SUMMARY.md")
    assert (entry.failure_classes, entry.max_abs_err) == (("numeric",), ErrorRange(0.2, 0.3, 2.0))
    assert entry.source.endswith("KNOWN_FAILURES.md:8")
    assert other.evidence is None and other.runner == ("*",)
    assert (other.failure_classes, other.max_abs_err) == (("crash",), None)


MALFORMED = {
    "unknown fix": (
        ENTRY.replace("- evidence:", "- fixed_by: fa-no-such-fix\n- evidence:"),
        ["KNOWN_FAILURES.md:11", "entry KF-fa4-tree-graph", "field 'fixed_by' is 'fa-no-such-fix'",
         "one of fa-kv-past-context"],
    ),
    "unknown field": (
        ENTRY.replace("- evidence:", "- evidnce:"),
        ["KNOWN_FAILURES.md:11", "entry KF-fa4-tree-graph", "unknown field 'evidnce'", "valid fields: backend"],
    ),
    "missing field": (
        ENTRY.replace("- upstream: sglang#12345\n", ""),
        ["KNOWN_FAILURES.md:1", "entry KF-fa4-tree-graph", "missing field 'upstream'", "owner/repo#N"],
    ),
    "duplicate id": (
        ENTRY + "\n" + ENTRY,
        ["KNOWN_FAILURES.md:16", "KF-fa4-tree-graph is defined twice", "first at", "KNOWN_FAILURES.md:1"],
    ),
    "missing class": (
        ENTRY.replace("- class: numeric\n", ""),
        ["KNOWN_FAILURES.md:1", "entry KF-fa4-tree-graph", "missing field 'class'", "census-only, numeric, nan"],
    ),
    "unknown class": (
        ENTRY.replace("class: numeric", "class: NaN"),
        ["KNOWN_FAILURES.md:9", "entry KF-fa4-tree-graph", "field 'class' is 'NaN'", "is no failure class", "among census-only, numeric"],
    ),
    "measured class without its range": (
        ENTRY.replace("- max_abs_err: 0.2-0.3, margin x2\n", ""),
        ["KNOWN_FAILURES.md:9", "entry KF-fa4-tree-graph", "missing field 'max_abs_err', required for class "
         "'numeric'", "'<low>-<high>, margin x<k>'"],
    ),
    "range on a class without a size": (
        ENTRY.replace("class: numeric", "class: invariant"),
        ["KNOWN_FAILURES.md:10", "entry KF-fa4-tree-graph", "field 'max_abs_err': class 'invariant' has no error "
         "size", "drop the field"],
    ),
    "range without margin": (
        ENTRY.replace("0.2-0.3, margin x2", "0.2-0.3"),
        ["KNOWN_FAILURES.md:10", "entry KF-fa4-tree-graph", "field 'max_abs_err' is '0.2-0.3'",
         "'<low>-<high>, margin x<k>' with 0 < low <= high and k >= 1"],
    ),
    "range upside down": (
        ENTRY.replace("0.2-0.3, margin x2", "0.3-0.2, margin x2"),
        ["KNOWN_FAILURES.md:10", "field 'max_abs_err' is '0.3-0.2, margin x2'", "0 < low <= high"],
    ),
    "margin below one": (
        ENTRY.replace("margin x2", "margin x0.5"),
        ["KNOWN_FAILURES.md:10", "field 'max_abs_err' is '0.2-0.3, margin x0.5'", "k >= 1"],
    ),
    "bad runner": (
        ENTRY.replace("runner: cuda_graph", "runner: graph"),
        ["KNOWN_FAILURES.md:4", "field 'runner'", "'graph' matches no runner", f"{', '.join(RUNNERS)} or *"],
    ),
    "bad release": (
        ENTRY.replace("- class: numeric", "- releases: 0.4.*\n- class: numeric"),
        ["KNOWN_FAILURES.md:9", "field 'releases'", "'0.4.*' matches no release", "0.5.17, 0.5.18"],
    ),
    "bad heading": (
        ENTRY.replace("## KF-fa4-tree-graph", "## fa4 tree graph"),
        ["KNOWN_FAILURES.md:1", "'## fa4 tree graph' must read '## KF-<slug>'"],
    ),
    "bad upstream": (
        ENTRY.replace("sglang#12345", "see slack"),
        ["KNOWN_FAILURES.md:8", "field 'upstream' is 'see slack'", "owner/repo#N"],
    ),
    "bullet without field": (
        ENTRY.replace("- mode: target_verify", "- target_verify"),
        ["KNOWN_FAILURES.md:3", "bullet '- target_verify' must read '- <field>: <value>'"],
    ),
    "empty value": (
        ENTRY.replace("- backend: fa4", "- backend:"),
        ["KNOWN_FAILURES.md:2", "field 'backend' is empty", "globs over the backend"],
    ),
}


@pytest.mark.parametrize("text, expected", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_entry_message(tmp_path, text, expected):
    with pytest.raises(KnownFailuresError) as raised:
        load_known_failures(write(tmp_path, text))
    for part in expected:
        assert part in str(raised.value)


def test_match_selectors(tmp_path):
    entries = load_known_failures(write(tmp_path, ENTRY + "\n" + SECOND))
    assert match(entries, cell()).id == "KF-fa4-tree-graph"  # case glob over the cell_id
    assert match(entries, cell(cell_id="x", case="chain-bs1")).id == "KF-fa4-tree-graph"  # over the case
    assert match(entries, cell(runner="eager")) is None
    assert match(entries, cell(backend="triton", runner="eager")).id == "KF-any-triton"


def test_releases_select_the_installed_release(tmp_path, monkeypatch):
    """An entry for a bug fixed in a later release covers only the releases it is in."""
    import harness.ledger.known_failures as known_failures

    fixed_later = ENTRY.replace("- class: numeric", "- releases: 0.5.1[7-9], 0.5.2[0-2]\n- class: numeric")
    [entry] = load_known_failures(write(tmp_path, fixed_later))
    assert entry.releases == ("0.5.1[7-9]", "0.5.2[0-2]")
    for release, covered in (("0.5.17", True), ("0.5.22", True), ("0.5.23", False)):
        monkeypatch.setattr(known_failures, "_installed_release", lambda: release)
        assert (match([entry], cell()) is entry) is covered, release
    assert stale([entry], []) == []  # on 0.5.23 the bug is not there: not stale, out of scope
    assert load_known_failures(write(tmp_path, ENTRY))[0].releases == ("*",)  # left out: every release


def test_stale(tmp_path):
    entries = load_known_failures(write(tmp_path, ENTRY + "\n" + SECOND))
    assert [entry.id for entry in stale(entries, [cell()])] == ["KF-any-triton"]
    assert stale(entries, [cell(), cell(backend="triton")]) == []


def test_an_entry_whose_cells_were_left_out_is_not_stale(tmp_path):
    """0.5.17 leaves a FlashInfer draft cell out (the backend's limits on that release): the entry selecting
    it has a cell in the matrix, which that release never runs; it is not judged, not called stale."""
    entries = load_known_failures(write(tmp_path, ENTRY + "\n" + SECOND))
    left = left_out_known(entries, [cell(backend="triton")])
    assert left == ["KF-any-triton"]
    assert stale(entries, [cell()], left_out_known=left) == []
    assert left_out_known(entries, []) == [] and [e.id for e in stale(entries, [cell()], left_out_known=[])] == [
        "KF-any-triton"]


def test_an_entry_for_generated_cases_is_judged_only_in_a_run_that_drew_some(tmp_path):
    [entry] = load_known_failures(write(tmp_path, ENTRY.replace("`*-tree-*`, chain-bs1", "`gen*`")))
    assert entry.selects_generated_only
    assert stale([entry], [cell()]) == []  # a hand-made run: nothing it could have matched
    drawn = cell(cell_id="target_verify-gen0-3-b1-triton-eager", case="gen0-3-b1", backend="triton")
    assert stale([entry], [cell(), drawn]) == [entry]  # drew cases, none its own
    assert stale([entry], [drawn, cell(cell_id="target_verify-gen0-4-b2-fa4-cuda_graph", case="gen0-4-b2")]) == []


def test_an_entry_for_hand_made_cases_is_not_stale_in_a_run_of_the_generated_tier_alone(tmp_path):
    """`--generated-only` runs no hand-made case, so an entry for hand-made cases had nothing to match."""
    [entry] = load_known_failures(write(tmp_path, ENTRY))
    drawn = cell(cell_id="target_verify-gen0-3-b1-triton-eager", case="gen0-3-b1", backend="triton")
    assert stale([entry], [drawn]) == []
    assert stale([entry], [drawn, cell(backend="triton")]) == [entry]  # with a hand-made cell it could match


def test_the_format_documents_every_failure_class_as_the_registry_says():
    text = REPO_LEDGER.read_text()
    for name, meaning in FAILURE_CLASSES.items():
        documented = re.escape(meaning)
        for detector in DETECTORS:  # the table writes an exception's name as code
            documented = documented.replace(detector, f"`{detector}`")
        assert re.search(rf"\| `{re.escape(name)}` \| {documented} \|", text), name


def test_error_ranges_in_exponent_notation_and_their_bounds(tmp_path):
    [entry] = load_known_failures(write(tmp_path, ENTRY.replace("0.2-0.3, margin x2", "3.6e-3-1.56e-2, margin x1.5")))
    assert entry.max_abs_err == ErrorRange(0.0036, 0.0156, 1.5)
    assert entry.max_abs_err.bounds == pytest.approx((0.0024, 0.0234))
    assert 0.00241 in entry.max_abs_err and 0.02339 in entry.max_abs_err
    assert 0.00239 not in entry.max_abs_err and 0.02341 not in entry.max_abs_err


def numeric(max_abs_err, failure_class="numeric"):
    return Failure(failure_class, "eager vs reference", "eager vs reference step 0: ...", max_abs_err)


@pytest.mark.parametrize("failure, difference", [
    (numeric(0.1), None),  # the low end: 0.2 / 2
    (numeric(0.6), None),  # the high end: 0.3 x 2
    (numeric(0.61), "max_abs_err 0.61 is outside 0.1-0.6 (measured 0.2-0.3, margin x2)"),
    (numeric(0.05), "max_abs_err 0.05 is outside 0.1-0.6"),
    (numeric(None), "max_abs_err no finite error is outside"),
    (numeric(0.25, "census-only"), "it fails as census-only (only the key-census head differs"),
    (numeric(None, "nan"), "it fails as nan (NaN in the output"),
    (Failure("crash", "the process died", "worker 'gw0' crashed"), "it fails as crash"),
], ids=["low-end", "high-end", "above", "below", "no-finite-error", "census-only", "nan", "crash"])
def test_a_covered_failure_inside_or_outside_the_signature(tmp_path, failure, difference):
    [entry] = load_known_failures(write(tmp_path, ENTRY))
    found = entry.outside_signature(failure)
    if difference is None:
        assert found is None
    else:
        assert found.startswith(f"outside the signature of KF-fa4-tree-graph: {difference}"), found
        assert found.endswith(f"; {failure.message}")
    with pytest.raises(InsideSignature if difference is None else OutsideSignature) as verdict:
        entry.judge(failure)
    assert difference is None or str(verdict.value) == found


def test_an_entry_of_several_classes_admits_each_and_ranges_only_the_measured(tmp_path):
    """One bug that shows as census-only, numeric or a crash, depending on what lies where it reads."""
    [entry] = load_known_failures(write(tmp_path, ENTRY.replace("class: numeric", "class: census-only, numeric, crash")))
    assert entry.failure_classes == ("census-only", "numeric", "crash")
    assert entry.outside_signature(numeric(0.25, "census-only")) is None
    assert entry.outside_signature(numeric(0.25)) is None
    assert entry.outside_signature(Failure("crash", "the process died", "worker 'gw0' crashed")) is None
    assert "max_abs_err 0.9 is outside" in entry.outside_signature(numeric(0.9, "census-only"))
    assert "the entry says census-only or numeric or crash" in entry.outside_signature(numeric(None, "nan"))


def test_an_entry_of_unmeasured_classes_takes_no_range(tmp_path):
    text = ENTRY.replace("class: numeric", "class: crash, error")
    with pytest.raises(KnownFailuresError, match="has no error size; drop the field"):
        load_known_failures(write(tmp_path, text))
    [entry] = load_known_failures(write(tmp_path, text.replace("- max_abs_err: 0.2-0.3, margin x2\n", "")))
    assert (entry.failure_classes, entry.max_abs_err) == (("crash", "error"), None)


def test_traits_narrow_an_entry_to_the_cases_that_have_them(tmp_path):
    [entry] = load_known_failures(write(tmp_path, ENTRY.replace("- class:", "- traits: past-context\n- class:")))
    assert entry.traits == ("past-context",)
    assert entry.matches(cell(traits=["past-context"]))
    assert not entry.matches(cell(traits=[]))
    assert not entry.matches(cell())  # a record written before traits existed


def test_an_unknown_trait_is_refused_by_name(tmp_path):
    with pytest.raises(KnownFailuresError, match=r":9: entry KF-fa4-tree-graph: field 'traits': 'past-ctx' is no case trait"):
        load_known_failures(write(tmp_path, ENTRY.replace("- class:", "- traits: past-ctx\n- class:")))


def test_the_summary_names_entries_the_generated_tier_passed_over_not_stale(tmp_path):
    """A generated run that passed over every draw an entry covers ran none of its cells: the summary
    says so instead of calling the entry stale (run.json's generated.passed_over)."""
    from harness.reporting.summary import stale_section

    entries = load_known_failures(write(tmp_path, ENTRY + "\n" + SECOND))
    executed = [{**cell(), "status": "xfailed"}]
    plain = stale_section(executed, entries)
    assert any(line.startswith("- KF-any-triton") for line in plain)
    runs = [{"run_id": "r", "generated": {"passed_over": {"KF-any-triton": 3}}}]
    drawn = stale_section(executed, entries, runs)
    assert not any(line.startswith("- KF-any-triton") for line in drawn)
    assert "Not stale: the generated tier passed over draws they cover (known to fail, not run): KF-any-triton (3)." in drawn
    assert drawn[-1] == "None."


@pytest.mark.parametrize("ran, listed", [("0.5.17", True), ("0.5.23", False)])
def test_the_summary_judges_staleness_in_the_release_the_run_used_whatever_is_installed(tmp_path, ran, listed):
    """An entry for 0.5.17 alone that matched nothing in a 0.5.17 run is stale there, even when the
    summary is written where 0.5.23 is installed; in a 0.5.23 run it is out of scope, not stale."""
    from harness.reporting.summary import stale_section

    entries = load_known_failures(write(tmp_path, SECOND.replace("- class:", "- releases: 0.5.17\n- class:")))
    executed = [{**cell(), "status": "passed"}]
    lines = stale_section(executed, entries, [{"run_id": "r", "versions": {"sglang": ran}}])
    assert any(line.startswith("- KF-any-triton") for line in lines) == listed


def test_an_entry_for_a_form_the_machine_left_out_is_not_judged_by_its_run(tmp_path):
    """On a GPU the CPU stand-in (cg_meta) is not collected: its entries are left unjudged there, in the
    terminal and in the summary (run.json left_out), and judged as usual where the form ran."""
    from harness.reporting.summary import stale_section

    [entry] = load_known_failures(write(tmp_path, ENTRY.replace("- runner: cuda_graph", "- runner: cg_meta")))
    assert stale([entry], [cell(runner="eager")]) == [entry]
    assert stale([entry], [cell(runner="eager")], unjudged_runners={"cg_meta"}) == []
    runs = [{"run_id": "r", "left_out": [{"kind": LEFT_OUT_HERE, "why": "-", "backend": "fa4", "runner": "cg_meta",
                                          "cells": 4}]}]
    assert stale_section([{**cell(runner="eager"), "status": "passed"}], [entry], runs)[-1] == "None."


@pytest.mark.parametrize("has_gpu", [False, True])
def test_an_entry_only_a_gpu_detector_sees_stands_aside_on_a_cpu(tmp_path, monkeypatch, has_gpu):
    """A host-sync entry's cells pass on a CPU (no device to wait on): there they are neither its
    expected failures nor evidence that it is stale; a numeric entry is judged everywhere."""
    from harness.base import platform

    monkeypatch.setattr(platform, "HAS_GPU", has_gpu)
    text = ENTRY.replace("- class: numeric\n- max_abs_err: 0.2-0.3, margin x2\n", "- class: host-sync\n")
    [sync_entry] = load_known_failures(write(tmp_path, text))
    [numeric_entry] = load_known_failures(write(tmp_path, ENTRY))
    assert sync_entry.judgeable_here() is has_gpu and numeric_entry.judgeable_here()
    assert numeric_entry.masks_numbers and not sync_entry.masks_numbers  # the generated tier still draws its cells
    other = cell(cell_id="x-fa3-eager", case="x", backend="fa3", runner="eager")
    assert stale([sync_entry], [other]) == ([sync_entry] if has_gpu else [])
