"""The KNOWN_FAILURES.md ledger: what parses, what is refused with which message, what matches."""


import pytest

from harness import ROOT
from harness.known_failures import KnownFailuresError, load_known_failures, match, stale
from harness.runners import RUNNER_NAMES as RUNNERS

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
    assert entry.source.endswith("KNOWN_FAILURES.md:8")
    assert other.evidence is None and other.runner == ("*",)


MALFORMED = {
    "unknown field": (
        ENTRY.replace("- evidence:", "- evidnce:"),
        ["KNOWN_FAILURES.md:9", "entry KF-fa4-tree-graph", "unknown field 'evidnce'", "valid fields: backend"],
    ),
    "missing field": (
        ENTRY.replace("- upstream: sglang#12345\n", ""),
        ["KNOWN_FAILURES.md:1", "entry KF-fa4-tree-graph", "missing field 'upstream'", "sglang#12345"],
    ),
    "duplicate id": (
        ENTRY + "\n" + ENTRY,
        ["KNOWN_FAILURES.md:14", "KF-fa4-tree-graph is defined twice", "first at", "KNOWN_FAILURES.md:1"],
    ),
    "bad runner": (
        ENTRY.replace("runner: cuda_graph", "runner: graph"),
        ["KNOWN_FAILURES.md:4", "field 'runner'", "'graph' matches no runner", f"{', '.join(RUNNERS)} or *"],
    ),
    "bad heading": (
        ENTRY.replace("## KF-fa4-tree-graph", "## fa4 tree graph"),
        ["KNOWN_FAILURES.md:1", "'## fa4 tree graph' must read '## KF-<slug>'"],
    ),
    "bad upstream": (
        ENTRY.replace("sglang#12345", "see slack"),
        ["KNOWN_FAILURES.md:8", "field 'upstream' is 'see slack'", "a URL or owner/repo#N"],
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


def test_stale(tmp_path):
    entries = load_known_failures(write(tmp_path, ENTRY + "\n" + SECOND))
    assert [entry.id for entry in stale(entries, [cell()])] == ["KF-any-triton"]
    assert stale(entries, [cell(), cell(backend="triton")]) == []
