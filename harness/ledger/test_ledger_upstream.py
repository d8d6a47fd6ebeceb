"""The ledger's rules about where a bug is tracked, held against the packets under findings/.

Each rule is broken once here and must answer with one line naming the entry and the field: an
upstream that is no thread, a 'new:' without its packet, an entry its packet tracks elsewhere, a root
cause in another project left unsaid, a vendored fix the releases still cover, an entry retired badly.
"""

import pytest

from harness.bugs.finding_packets import Finding
from harness.ledger.known_failures import KnownFailuresError, load_known_failures, match, standing

ENTRY = """\
## KF-x-bug
- backend: flashinfer
- mode: target_verify
- runner: eager
- cases: `*-x-*`
- reason: a bug
- upstream: {upstream}
- class: error
{extra}"""


def packet(status: str = "new", root_cause: str = "sglang", **fields) -> Finding:
    base = dict(title="t", status=status, root_cause=root_cause, affected=["0.5.17", "0.5.23"],
                code_path=[dict(releases="0.5.23", where="a.py: f")],
                serving=dict(config="c", needs_speculative=False, why="w"), read_on="today",
                known_failures=["KF-x-bug"], fix="triton-kv-past-context")
    if status == "duplicate":
        base.update(upstream=[dict(thread="sgl-project/sglang#7", state="open", relation="same bug", note="n")],
                    adds="more")
    if status == "fixed":
        base.update(upstream=[dict(thread="flashinfer-ai/flashinfer#9", state="merged", relation="fixed it",
                                   note="n")], fixed_in="flashinfer 0.7.1 (flashinfer-ai/flashinfer#9)")
    return Finding.model_validate({**base, **fields})


def load(tmp_path, text: str, findings: dict):
    path = tmp_path / "KNOWN_FAILURES.md"
    path.write_text(text)
    return load_known_failures(path, findings=findings)


def entry(upstream: str, extra: str = "") -> str:
    return ENTRY.format(upstream=upstream, extra=extra)


ACCEPTED_THREADS = {
    "sgl-project/sglang#7": "sgl-project/sglang#7",
    "sglang#7": "sgl-project/sglang#7",
    "https://github.com/sgl-project/sglang/pull/7": "sgl-project/sglang#7",
    "https://github.com/Dao-AILab/flash-attention/issues/2374": "Dao-AILab/flash-attention#2374",
}


@pytest.mark.parametrize("upstream", ACCEPTED_THREADS)
def test_a_thread_is_named_as_owner_repo_number(tmp_path, upstream):
    [found] = load(tmp_path, entry(upstream), findings={})
    assert found.thread == ACCEPTED_THREADS[upstream] and found.new_finding is None


REFUSED = {
    "source file": ("https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/a.py",
                    ["entry KF-x-bug", "field 'upstream'", "a link to source code is no tracking thread", "new: <finding>"]),
    "no owner": ("somerepo#3", ["entry KF-x-bug", "field 'upstream' is 'somerepo#3'", "an owner is needed"]),
    "prose": ("see slack", ["entry KF-x-bug", "field 'upstream' is 'see slack'", "owner/repo#N"]),
}


@pytest.mark.parametrize("upstream, expected", REFUSED.values(), ids=REFUSED)
def test_an_upstream_that_is_no_thread_is_refused(tmp_path, upstream, expected):
    with pytest.raises(KnownFailuresError) as raised:
        load(tmp_path, entry(upstream), findings={})
    assert all(part in str(raised.value) for part in expected), str(raised.value)


BROKEN = {
    "new without a packet": (entry("new: no-such-finding"), {},
                             ["entry KF-x-bug", "names findings/no-such-finding/, which does not exist"]),
    "new where the packet is a duplicate": (entry("new: p"), {"p": packet("duplicate")},
                                            ["findings/p is duplicate", "cite its thread (sgl-project/sglang#7)"]),
    "a thread where the packet is new": (entry("sgl-project/sglang#7"), {"p": packet("new")},
                                         ["field 'upstream' is 'sgl-project/sglang#7'", "findings/p", "'new: p'"]),
    "another thread than the packet's": (entry("sgl-project/sglang#8"), {"p": packet("duplicate")},
                                         ["findings/p, its packet, is tracked by sgl-project/sglang#7"]),
    "a cause elsewhere left unsaid": (entry("flashinfer-ai/flashinfer#9"), {"p": packet("fixed", "flashinfer")},
                                      ["field 'root_cause' is 'missing'", "'flashinfer, fixed in 0.7.1'"]),
    "the wrong fix release": (entry("flashinfer-ai/flashinfer#9", "- root_cause: flashinfer, fixed in 0.7.2\n"),
                              {"p": packet("fixed", "flashinfer")}, ["'flashinfer, fixed in 0.7.2'", "0.7.1"]),
    "a malformed cause": (entry("sglang#7", "- root_cause: flashinfer 0.7.1\n"), {},
                          ["field 'root_cause' is 'flashinfer 0.7.1'", "'fixed in <release>'"]),
    "sglang as the other project": (entry("sglang#7", "- root_cause: sglang, not fixed yet\n"), {},
                                    ["field 'root_cause' is 'sglang, not fixed yet'"]),
    "a vendored fix the releases still cover": (
        entry("sglang#7", "- releases: 0.5.1[7-9], 0.5.2[0-2]\n- root_cause: flash-attention, fixed in sglang 0.5.22\n"),
        {}, ["field 'releases' covers 0.5.22", "sglang 0.5.22 fixed it"]),
}


@pytest.mark.parametrize("text, findings, expected", BROKEN.values(), ids=BROKEN)
def test_an_entry_its_packet_contradicts_is_refused(tmp_path, text, findings, expected):
    with pytest.raises(KnownFailuresError) as raised:
        load(tmp_path, text, findings)
    assert all(part in str(raised.value) for part in expected), str(raised.value)


def test_an_entry_that_agrees_with_its_packet_loads(tmp_path):
    [found] = load(tmp_path, entry("flashinfer-ai/flashinfer#9", "- root_cause: flashinfer, fixed in 0.7.1\n"),
                   {"p": packet("fixed", "flashinfer")})
    assert str(found.root_cause) == "flashinfer, fixed in 0.7.1"
    [vendored] = load(tmp_path, entry("sglang#7", "- releases: 0.5.17\n- root_cause: flash-attention, fixed in "
                                      "sglang 0.5.22\n"), {})
    assert str(vendored.root_cause) == "flash-attention, fixed in sglang 0.5.22"
    [new] = load(tmp_path, entry("new: p"), {"p": packet("new")})
    assert new.new_finding == "p" and new.thread is None


TWO = entry("sglang#7").replace("KF-x-bug", "KF-a") + "\n" + entry("sglang#8").replace("KF-x-bug", "KF-b")
RETIRED = "\n## KF-sum\n- retired_into: {into}\n{extra}\nWhy it was retired.\n"


def test_a_retired_entry_points_at_the_entries_it_was_the_sum_of_and_matches_nothing(tmp_path):
    entries = load(tmp_path, TWO + RETIRED.format(into="KF-a, KF-b", extra=""), {})
    assert [found.id for found in entries] == ["KF-a", "KF-b"]


RETIRED_BADLY = {
    "an unknown target": (RETIRED.format(into="KF-a, KF-c", extra=""), ["entry KF-sum", "'KF-c' is no live entry"]),
    "one target": (RETIRED.format(into="KF-a", extra=""), ["entry KF-sum", "names fewer than two entries"]),
    "fields besides": (RETIRED.format(into="KF-a, KF-b", extra="- class: numeric\n"),
                       ["entry KF-sum", "field 'class': a retired entry takes no other field"]),
}


@pytest.mark.parametrize("tail, expected", RETIRED_BADLY.values(), ids=RETIRED_BADLY)
def test_a_badly_retired_entry_is_refused(tmp_path, tail, expected):
    with pytest.raises(KnownFailuresError) as raised:
        load(tmp_path, TWO + tail, {})
    assert all(part in str(raised.value) for part in expected), str(raised.value)


def test_a_packet_naming_an_entry_the_repository_ledger_lacks_is_refused(monkeypatch, tmp_path):
    import harness.ledger.known_failures as known_failures

    path = tmp_path / "KNOWN_FAILURES.md"
    path.write_text(entry("sglang#7").replace("KF-x-bug", "KF-other"))
    monkeypatch.setattr(known_failures, "KNOWN_FAILURES_FILE", path)  # judged as the repository's ledger
    with pytest.raises(KnownFailuresError) as raised:
        load_known_failures(path, findings={"p": packet("duplicate")})
    assert "findings/p/finding.yaml: field 'known_failures' names KF-x-bug, which" in str(raised.value)


def test_several_fixes_stand_their_entries_aside_together(tmp_path):
    """A cell that shows two bugs (each its entry and fix) passes only with both fixes applied."""
    text = (entry("sglang#7", "- fixed_by: triton-kv-past-context\n").replace("KF-x-bug", "KF-a") + "\n"
            + entry("sglang#8", "- fixed_by: fa-kv-past-context\n").replace("KF-x-bug", "KF-b"))
    entries = load(tmp_path, text, {})
    cell = dict(cell_id="target_verify-x-y-flashinfer-eager", case="x-y", backend="flashinfer",
                mode="target_verify", runner="eager")
    assert match(standing(entries, "triton-kv-past-context"), cell).id == "KF-b"
    assert match(standing(entries, "triton-kv-past-context,fa-kv-past-context"), cell) is None
