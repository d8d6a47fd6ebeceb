"""The packets under findings/ work without the harness and say only what their data says.

Every finding.yaml is valid and a malformed one is refused by file and field; each README's status part
is what finding.yaml and measured/ render; each repro.py imports nothing of the harness; fix.diff is the
harness's patch against the newest release, and the patch applies to the installed one; the bundler
makes one self-contained script; and the one reproducer a CPU can run (Triton's) fails on stock sglang
and passes with its fix here, as it did on the H200.
"""

import ast
import sys
import types

import pytest
import yaml

from harness.bugs.finding_packets import FINDINGS_DIR, FindingError, load, slugs
from harness.bugs.findings import STANDIN, bundle, outcome, render, run_finding, verdict
from harness.base.releases import KNOWN_RELEASES, installed
from harness.bugs.seed_bugs import FIXES, patched_file, unified_diff

PACKETS = slugs()


def test_every_packet_is_a_folder_with_its_parts():
    assert len(PACKETS) >= 9
    for slug in PACKETS:
        finding = load(slug)
        parts = {"README.md", "repro.py", "finding.yaml"} | ({"fix.diff"} if finding.fix else set())
        assert parts <= {p.name for p in (FINDINGS_DIR / slug).iterdir()}
        assert finding.fix or not (FINDINGS_DIR / slug / "fix.diff").exists(), f"{slug}: a fix.diff no fix names"


BROKEN_PACKETS = {
    "a missing field": (lambda d: d.pop("serving"), "field 'serving': Field required"),
    "fixed without a release": (lambda d: d.update(status="fixed"), "fixed_in: required where status is fixed"),
    "a duplicate of nothing": (lambda d: d.update(status="duplicate", upstream=[]), "a duplicate names the thread"),
    "an unknown release": (lambda d: d.update(affected=["0.4.1"]), "affected: 0.4.1 is no known release"),
    "an extra field": (lambda d: d.update(severity="high"), "field 'severity': Extra inputs are not permitted"),
    "neither a fix nor why not": (lambda d: d.pop("fix"), "name the harness fix, or leave it out and say why"),
    "a fix and why not": (lambda d: d.update(no_fix="n"), "name the harness fix, or leave it out and say why"),
    "a thread that is a URL": (lambda d: d["upstream"].append(dict(thread="https://github.com/a/b/issues/1", state="open",
                                                                   relation="related", note="n")),
                               "is no thread reference; write owner/repo#N"),
}


@pytest.mark.parametrize("change, expected", BROKEN_PACKETS.values(), ids=BROKEN_PACKETS)
def test_a_malformed_packet_is_refused_by_file_and_field(tmp_path, monkeypatch, change, expected):
    import harness.bugs.finding_packets as packets

    data = yaml.safe_load((FINDINGS_DIR / "triton-kv-past-context" / "finding.yaml").read_text())
    change(data)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "finding.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(packets, "FINDINGS_DIR", tmp_path)
    monkeypatch.setattr(packets, "ROOT", tmp_path)
    with pytest.raises(FindingError) as raised:
        load("x")
    assert str(raised.value).startswith("x/finding.yaml: ") and expected in str(raised.value), str(raised.value)


@pytest.mark.parametrize("slug", PACKETS)
def test_the_readme_status_is_rendered_from_the_packet(slug):
    assert render(slug, check=True), f"findings/{slug}/README.md is stale: python -m harness findings render"


@pytest.mark.parametrize("slug", PACKETS)
def test_a_reproducer_needs_no_harness(slug):
    tree = ast.parse((FINDINGS_DIR / slug / "repro.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"sys", "copy", "pathlib", "traceback", "types", "torch", "sglang", "flashinfer", "sglang_standin"}, imported


def test_the_stand_in_needs_no_harness():
    tree = ast.parse((FINDINGS_DIR / STANDIN).read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(module.startswith("harness") for module in modules)


@pytest.mark.parametrize("slug", [slug for slug in PACKETS if load(slug).fix])
def test_fix_diff_is_the_patch_and_applies_here(slug):
    """fix.diff is the harness's patch against the newest release; on another release the same patch
    (the reproducer's --fixed run) still applies."""
    patches = FIXES[load(slug).fix].source
    from harness.bugs.findings import _installed_sglang

    site = _installed_sglang().parent
    if installed().contracts == KNOWN_RELEASES[-1]:
        assert unified_diff(patches, site) == (FINDINGS_DIR / slug / "fix.diff").read_text()
    for path in {patch.path_in(site) for patch in patches}:
        if path.exists():  # sglang 0.5.17 keeps FA4's cute code elsewhere: that fix has nothing to patch there
            patched_file(tuple(p for p in patches if p.path_in(site) == path), path)


@pytest.mark.parametrize("slug", ["triton-kv-past-context", "flashinfer-deterministic-verify-graph"])
def test_a_bundle_is_one_script_that_runs(slug, monkeypatch):
    """Every definition of the bundle runs (not main: the module is not __main__), so a stand-in
    annotation naming a class defined later, or a lost import, fails here and not in an issue."""
    script = bundle(slug)
    assert "sglang_standin" not in script.split("# --- the reproducer ---")[1]
    module = types.ModuleType("bundle_check")  # dataclasses look their module up in sys.modules
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(script, "repro_standalone.py", "exec"), module.__dict__)


@pytest.mark.parametrize("affected, stock, fixed, claimed", [
    (True, "bug", "ok", True), (True, "ok", "ok", False), (True, "bug", "bug", False), (True, "broken", "ok", False),
    (False, "ok", "ok", True), (False, "bug", "ok", False)])
def test_a_run_is_judged_by_the_release_it_ran_on(affected, stock, fixed, claimed):
    finding = load("flashinfer-graph-workspace")  # affects 0.5.17-0.5.21 only
    release = finding.affected[0] if affected else "0.5.23"
    assert verdict(finding, release, stock, fixed)[0] is claimed


def test_a_packet_without_a_fix_is_judged_by_its_stock_run():
    finding = load("flashinfer-graph-workspace").model_copy(update=dict(fix=None, no_fix="none is clear"))
    assert verdict(finding, finding.affected[0], "bug", None)[0]
    assert not verdict(finding, finding.affected[0], "ok", None)[0]
    assert verdict(finding, "0.5.23", "ok", None)[0]


def test_a_run_needs_its_lines_not_only_its_exit_status():
    assert outcome(dict(exit=1, said=["BUG: x"])) == "bug"
    assert outcome(dict(exit=134, said=["BUG: x"])) == "bug"  # a corrupted heap ending the process counts
    assert outcome(dict(exit=1, said=[])) == "broken"  # a traceback before the check is no evidence
    assert outcome(dict(exit=0, said=["OK: y"])) == "ok"
    assert outcome(dict(exit=0, said=[])) == "broken"
    assert outcome(dict(exit=None, said=["OK: y"])) == "broken"  # timed out


@pytest.mark.skipif(sys.platform != "linux", reason="the reproducer's sglang copy is made on Linux")
def test_the_triton_reproducer_fails_stock_and_passes_fixed_without_the_harness(tmp_path):
    """On CPU (Triton's interpreter) as on the H200: stock writes past the GPU-only kv_indices, fixed fits."""
    result = run_finding("triton-kv-past-context", tmp_path, timeout_s=300)
    assert result["as_claimed"], result
    # the overrun said so, or (on the CPU, where the corrupted heap may abort first: 0.5.17 in CI twice)
    # killed the process right after the reproducer announced the unguarded call
    stock = result["stock"]
    said_so = any("past the end of the allocation" in line for line in stock["said"])
    died_inside = (stock["exit"] or 0) < 0 and stock["said"][-1:] and stock["said"][-1].startswith("UNGUARDED:")
    assert said_so or died_inside, stock


def test_an_abort_counts_as_the_bug_only_right_after_the_unguarded_call():
    """On the CPU an out-of-bounds index build can corrupt the heap and abort before the reproducer's
    own check prints BUG (seen in CI on 0.5.17): that abort is the bug only where the reproducer said it
    was entering the unguarded call; an abort anywhere else is a broken run."""
    unguarded = "UNGUARDED: init_forward_metadata builds kv_indices"
    assert outcome(dict(exit=-6, said=[unguarded])) == "bug"
    assert outcome(dict(exit=-6, said=[])) == "broken"
    assert outcome(dict(exit=-11, said=[unguarded, "OK: fits"])) == "broken"
    assert outcome(dict(exit=1, said=[unguarded, "BUG: wrote 2 past"])) == "bug"
    assert outcome(dict(exit=0, said=[unguarded, "OK: fits"])) == "ok"
