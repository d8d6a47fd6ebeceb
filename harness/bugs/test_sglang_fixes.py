"""Fixes (--apply-fix): each applies to the installed sglang and is the diff proposed upstream, a fix
that no longer matches says which function, and the FA fix widens exactly the page tables the
known failures name, checked on CPU where FA3's kernels are absent and only its metadata runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import ROOT
from harness.base import releases
from harness.case.cases import load_all_cases
from harness.cell.cell_matrix import cell_defining_args, expand_cells
from harness.ledger.known_failures import KNOWN_FAILURES_FILE, load_known_failures, match, standing
from harness.bugs.seed_bugs import FIXES, ReplayError, patch_source, unified_diff

FINDING = ROOT / "findings" / "fa-draft-extend-past-context" / "cases"
FA_FIX = FIXES["fa-kv-past-context"]


def _site_packages() -> Path:
    import importlib.util

    return Path(importlib.util.find_spec("sglang").origin).parent.parent


@pytest.mark.parametrize("fix_id", sorted(FIXES))
def test_fix_applies_to_the_installed_sglang(fix_id):
    """Every pattern matches the installed release's source as often as the fix expects, and the
    patched functions compile (read from the files: FA3's module imports kernels a CPU lacks)."""
    assert unified_diff(FIXES[fix_id].source, _site_packages())


@pytest.mark.skipif(releases.installed().contracts != "0.5.23", reason="fix.diff is written against sglang 0.5.23")
@pytest.mark.parametrize("fix_id", sorted(FIXES))
def test_the_diff_proposed_upstream_is_the_fix_the_harness_applies(fix_id):
    fix = FIXES[fix_id]
    assert unified_diff(fix.source, _site_packages()) == (ROOT / fix.upstream / "fix.diff").read_text()


def test_a_fix_that_no_longer_matches_names_the_function(tmp_path):
    site = tmp_path / "site"
    copy = FA_FIX.source[0].path_in(site)
    copy.parent.mkdir(parents=True)
    text = FA_FIX.source[0].path_in(_site_packages()).read_text()
    copy.write_text(text.replace("else self.max_context_len\n        )\n", "else self.context_bound\n        )\n", 1))
    with pytest.raises(ReplayError, match=r"FlashAttentionBackend\.init_forward_metadata .*found 0 times, the patch "
                                          r"expects 1; this sglang version no longer matches the patch"):
        unified_diff(FA_FIX.source, site)


def test_patch_source_keeps_zero_argument_super(tmp_path, monkeypatch):
    """A patched method is compiled with __class__ bound, as FlashAttentionBackend.__init__ needs."""
    (tmp_path / "fixture_classes.py").write_text(textwrap.dedent("""
        class Base:
            def __init__(self):
                self.base = True


        class Child(Base):
            def __init__(self):
                super().__init__()
                self.width = 1
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import fixture_classes

    patch_source(fixture_classes.Child, "__init__", [("self.width = 1", "self.width = 2")])
    made = fixture_classes.Child()
    assert (made.base, made.width) == (True, 2)


def test_patch_source_keeps_what_the_function_carries(tmp_path, monkeypatch):
    """State kept on a function survives the patch: FA4's _flash_attn_fwd reads its compile caches
    from its own attributes through the module global the patch replaces."""
    (tmp_path / "fixture_cached.py").write_text(textwrap.dedent("""
        def compiled(key):
            if key not in compiled.cache:
                compiled.cache[key] = key * 2
            return compiled.cache[key] + 1


        compiled.cache = {}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import fixture_cached

    cache = fixture_cached.compiled.cache
    patch_source(fixture_cached, "compiled", [("+ 1", "+ 10")])
    assert fixture_cached.compiled(3) == 16 and cache == {3: 6}


def test_a_fix_is_cell_defining_and_its_known_failures_stand_aside():
    options = {"--apply-fix": "fa-kv-past-context"}
    assert cell_defining_args(lambda option: options.get(option)) == ["--apply-fix", "fa-kv-past-context"]
    known = load_known_failures(KNOWN_FAILURES_FILE)
    fixed = {entry.id for entry in known if entry.fixed_by == "fa-kv-past-context"}
    assert fixed and not fixed & {entry.id for entry in standing(known, "fa-kv-past-context")}
    assert standing(known, None) == known


# The CPU check: FA3's FlashAttentionBackend built on the harness's pools with sgl_kernel stubbed
# (a stub kernel raises if called; only metadata code runs), each finding cell's own batch taken
# through the cell's metadata path, and every real request's page table compared with its row.
_RAISE = "def _stub(*a, **k):\n    raise NotImplementedError('stub: no kernel runs in this check')\n\n"
_STUB = {"sgl_kernel/__init__.py": _RAISE + "merge_state_v2 = _stub\n",
         "sgl_kernel/flash_attn.py": _RAISE + "flash_attn_varlen_func = flash_attn_with_kvcache = _stub\n"
                                              "get_scheduler_metadata = _stub\n"}
_CHECK = """
import json, sys
from pathlib import Path
import harness
from harness.families import BACKENDS
from harness.case.cases import load_all_cases
from harness.cell.cell_matrix import expand_cells
from harness.modes import MODES
from harness.cell.run_cell import built_backend
from harness.bugs.seed_bugs import apply_fix

def short_rows():
    found = {}
    for cell in expand_cells(load_all_cases(Path(sys.argv[1]))):
        if cell.backend != "fa3":
            continue
        spec, mode = cell.case.spec, MODES[cell.case.mode]
        with built_backend([spec], mode, BACKENDS["fa3"], extra_rows=spec.bs) as ((state,), _, backend):
            batch = mode.forward_batch(state, mode.steps(spec))
            if cell.runner == "cuda_graph":
                backend.init_cuda_graph_state(spec.bs, spec.bs * mode.tokens_per_request(spec))
                backend.init_forward_metadata_out_graph(batch, in_capture=True)
                backend.init_forward_metadata_out_graph(batch)
            else:
                backend.init_forward_metadata(batch)
            short = []
            for step in getattr(backend, "attn_backends", [backend]):
                metadata = step.forward_metadata
                for row in range(spec.bs):
                    pages = -(-int(metadata.cache_seqlens_int32[row]) // spec.page_size)
                    want = step.req_to_token[batch.req_pool_indices[row], ::spec.page_size][:pages] // spec.page_size
                    got = metadata.page_table[row, :pages]
                    if got.numel() < pages or not bool((got == want.to(got.dtype)).all()):
                        short.append(row)
            found[cell.cell_id] = sorted(set(short))
    return found

stock = short_rows()
apply_fix("fa-kv-past-context")
print(json.dumps({"stock": stock, "fixed": short_rows()}))
"""


@pytest.fixture(scope="module")
def page_tables(tmp_path_factory) -> dict:
    stub = tmp_path_factory.mktemp("stub")
    for name, text in _STUB.items():
        (stub / name).parent.mkdir(parents=True, exist_ok=True)
        (stub / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", _CHECK, str(FINDING)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_stock_fa_page_tables_are_short_exactly_in_the_known_failures(page_tables):
    """Request 0, at the context wall, misses keys in exactly the cells KNOWN_FAILURES.md names;
    the control cells (eager with full mirrors, eager page 16) hold its whole row."""
    known = load_known_failures(KNOWN_FAILURES_FILE)
    cells = {cell.cell_id: cell for cell in expand_cells(load_all_cases(FINDING))}
    short = {cell_id for cell_id, rows in page_tables["stock"].items() if rows}
    assert all(rows in ([], [0]) for rows in page_tables["stock"].values())
    assert short == {cell_id for cell_id in page_tables["stock"] if match(known, cells[cell_id].record_keys())}
    assert len(short) == 12 and len(page_tables["stock"]) == 16


def test_the_fix_gives_every_request_its_whole_row(page_tables):
    assert page_tables["fixed"] == {cell_id: [] for cell_id in page_tables["stock"]}


def test_a_fix_row_keeps_what_the_stock_cells_failed_with(monkeypatch):
    """A fix table is where a known failure's signature is first measured: each failing stock cell
    keeps its class, error and message, and the table shows the stock message when the fix holds."""
    from harness.bugs import replay

    def records(bug_id, selector, workers, tier, option="--replay"):
        status = "passed" if bug_id else "failed"
        return [{"cell_id": "c1", "status": status, "failure_class": None if bug_id else "numeric",
                 "max_abs_err": 0.001 if bug_id else 4.2, "reason": None if bug_id else "numeric: 4.2 > 0.03"},
                {"cell_id": "c2", "status": "skipped", "reason": "needs a GPU"}]

    monkeypatch.setattr(replay, "_run", records)
    row = replay.fix_row("flashinfer-window-ragged-extend", "1")
    assert row["verdict"] == "fixed" and row["executed"] == 1
    assert row["failing_stock"] == [{"cell": "c1", "status": "failed", "failure_class": "numeric",
                                     "max_abs_err": 4.2, "message": "numeric: 4.2 > 0.03"}]
    assert "| 1/1 | 0 | numeric: 4.2 > 0.03 |" in replay.fix_table([row])
