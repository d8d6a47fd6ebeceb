"""The generated tier: valid, reproducible, far-reaching draws; failures written out as case files
that rerun without a draw, and shrunk."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import Phase, find, settings

from harness import ROOT
from harness.search.case_strategy import DrawnCase, drawn_cases, head_choices, why_not_runnable
from harness.case.cases import fields_of, load_case_file, spec_from_fields
from harness.cell.cell_matrix import expand_cells
from harness.search.draw_caps import DEFAULT_DECODE_MAX_BS, PROFILES, cell_cost, machine_runs
from harness.ledger.failure_class import CRASHED, TIMED_OUT, of_exception
from harness.search.generated import draws_from_the_seed_alone, generated_tier
from harness.search.generated_plugin import CASES_FOLDER
from harness.checks.invariants import InvariantViolation
from harness.modes import MODES
from harness.case.case_limits import committed_wall
from harness.cell.run_cell import FORCE_CRASH_ENV
from harness.runners import GRAPH_RUNNER_NAMES, RUNNER_FORMS
from harness.fixtures.sglang_env import decode_capture_sizes
from harness.search.shrink import CellExecutor, shrink, write_case

DRAWS = 100


@pytest.fixture(scope="module", params=sorted(PROFILES))
def tier(request):
    return PROFILES[request.param], generated_tier(PROFILES[request.param], 0, DRAWS)


def test_every_draw_loads_as_a_case_file_and_is_one_cell_within_the_caps(tier, tmp_path):
    """The schema's own loader accepts each draw, and each draw is exactly the cell it was drawn for."""
    profile, generated = tier
    assert len(generated) == DRAWS
    for item in generated:
        path = tmp_path / f"{item.case.spec.name}.yaml"
        write_case(path, item.case.mode, fields_of(item.case.spec), [])
        (loaded,) = load_case_file(path)
        assert loaded.spec == item.case.spec and loaded.mode == item.case.mode
        (cell,) = expand_cells([loaded])
        assert (cell.backend, cell.runner) in machine_runs()
        assert cell_cost(MODES[loaded.mode], loaded.spec, RUNNER_FORMS[cell.runner].graph).over(profile) is None


def _reached(generated) -> dict[str, set]:
    seen = defaultdict(set)
    for item in generated:
        spec, (cell,) = item.case.spec, expand_cells([item.case])
        wall = committed_wall(MODES[item.case.mode], spec)
        seen["mode"].add(item.case.mode)
        seen["runner"].add(cell.runner)
        seen["padding"].add(cell.padding)
        for name in ("page_size", "host_mirrors", "kv_layout", "topk", "num_steps"):
            seen[name].add(getattr(spec, name))
        if spec.model:  # another family's served model: its shard, not dense head shapes
            seen["shard"].add((spec.family, spec.model, spec.num_heads))
        else:
            seen["head_dim"].add(spec.head_dim)
            seen["gqa"].add(spec.num_heads // spec.num_kv_heads)
        seen["bs"].add(spec.bs)
        seen["prefix"] |= {"0" if p == 0 else "1" if p == 1 else "wall" if p == wall else
                           "page edge" if p % spec.page_size in (0, 1, spec.page_size - 1) and spec.page_size > 1
                           else "other" for p in spec.prefix_lens}
        if cell.capture_bs is not None:
            pick = min(c for c in decode_capture_sizes(DEFAULT_DECODE_MAX_BS) if c >= spec.bs)
            seen["capture"] |= {label for label, hit in (("sglang's pick", cell.capture_bs == pick),
                                                          ("no padding", cell.capture_bs == spec.bs),
                                                          ("past the pick", cell.capture_bs > pick)) if hit}
    return seen


def test_draft_decode_draws_start_at_the_shortest_prefix_production_runs_it_on(tier):
    """Draft decode never runs on an empty prefix (harness/modes/draft_decode.py): drawn from 1 up, and
    1 is reached; the other modes still reach 0."""
    _, generated = tier
    shortest = defaultdict(set)
    for item in generated:
        shortest[item.case.mode == "draft_decode"].add(min(item.case.spec.prefix_lens))
    assert min(shortest[True]) == 1 and min(shortest[False]) == 0


def test_draws_reach_shapes_and_boundaries_the_hand_made_cases_never_do(tier):
    profile, generated = tier
    seen = _reached(generated)
    assert seen["mode"] == set(MODES)
    assert seen["runner"] == {runner for _, runner in machine_runs()}
    assert {"prod_fill", "small_real", None} <= seen["padding"]
    offered = head_choices(profile)
    assert seen["head_dim"] == {d for heads in offered for d in heads.head_dims}
    assert seen["gqa"] == {ratio for heads in offered for ratio in heads.gqa_ratios}
    shards = {(shard.family, *dict(shard.fields).values()) for shard in profile.family_shards}
    assert seen["shard"] and seen["shard"] <= shards, (seen["shard"], shards)  # MLA cells are drawn, as served
    assert seen["page_size"] == set(profile.page_sizes)
    assert seen["host_mirrors"] == {"full", "gpu_only", "none"}
    assert seen["kv_layout"] == {"contiguous", "shuffled", "interleaved", "non_monotonic"}
    assert profile.max_topk in seen["topk"] and profile.max_steps in seen["num_steps"]
    assert {"0", "1", "page edge"} <= seen["prefix"]  # the wall: test_draws_reach_the_context_wall
    assert {"sglang's pick", "no padding", "past the pick"} <= seen["capture"]
    assert 1 in seen["bs"] and max(seen["bs"]) > 8
    if profile.name == "gpu":  # above the largest capture size, where sglang runs eagerly
        assert max(seen["bs"]) > decode_capture_sizes(DEFAULT_DECODE_MAX_BS)[-1]


REACHED = {
    "at the wall": lambda mode, spec: committed_wall(mode, spec) in spec.prefix_lens,
    "one short of the wall": lambda mode, spec: committed_wall(mode, spec) - 1 in spec.prefix_lens,
    "a row past the context": lambda mode, spec: max(mode.row_lens(spec)) > spec.context_len,
}


@pytest.mark.parametrize("what", REACHED)
def test_draws_reach_the_context_wall(what):
    """The generator draws prefixes at the context wall (scheduler_rules.max_committed_prefix) and one token
    short of it, and so steps whose window reads past context_len into sglang's row headroom; searched
    rather than counted in a tier, where the cost caps make wall draws rare on the CPU profile."""
    decode_capture_sizes(DEFAULT_DECODE_MAX_BS)  # imports sglang outside the strategy (generated.py)
    reached = REACHED[what]
    with draws_from_the_seed_alone():
        drawn = find(drawn_cases(PROFILES["cpu"]),
                     lambda drawn: reached(MODES[drawn.mode], spec_from_fields(drawn.fields)),
                     settings=settings(database=None, derandomize=True, max_examples=2000, phases=[Phase.generate]))
    assert why_not_runnable(drawn.mode, drawn.fields, PROFILES["cpu"]) is None


def test_model_windows_are_drawn_at_their_edges_outside_the_known_failures(tier):
    """The model's sliding window: none, the smallest sglang serves (2), at a request's prefix or one off
    it, past every row; never with a draft window; no draw a KNOWN_FAILURES.md entry covers (but for one
    the cell shows only once its numbers pass)."""
    from harness.ledger.known_failures import KNOWN_FAILURES_FILE, load_known_failures, match

    profile, _ = tier
    generated = generated_tier(profile, 0, 2 * DRAWS)  # MLA draws (no windows) take a share of a tier
    known, seen = [entry for entry in load_known_failures(KNOWN_FAILURES_FILE) if entry.masks_numbers], set()
    for item in generated:
        spec, (cell,) = item.case.spec, expand_cells([item.case])
        assert not match(known, cell.record_keys()), cell.cell_id
        assert not (spec.sliding_window and spec.draft_window) and spec.sliding_window != 1
        assert (f"w{spec.sliding_window}" in spec.name) == bool(spec.sliding_window)
        window = spec.sliding_window
        seen |= {label for label, hit in (
            ("none", not window), ("smallest", window == 2),
            ("a prefix, one off", any(abs(window - p) <= 1 for p in spec.prefix_lens) and window > 2),
            ("over the longest prefix", window > max(spec.prefix_lens) + 1)) if hit}
    assert seen == {"none", "smallest", "a prefix, one off", "over the longest prefix"}, seen


_GENERATE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import harness
    {extra}
    from harness.search.draw_caps import PROFILES
    from harness.search.generated import draws_from_the_seed_alone, generated_tier
    tier = generated_tier(PROFILES["cpu"], int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps([[g.case.spec.name, g.case.mode, g.case.spec.model_dump()] for g in tier]))
""")


def _generate_elsewhere(tmp_path: Path, seed: int, count: int, extra: str = "") -> list:
    script = tmp_path / f"generate_{len(extra)}.py"
    script.write_text(_GENERATE.format(extra=extra))
    done = subprocess.run([sys.executable, str(script), str(ROOT), str(seed), str(count)],
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    return json.loads(done.stdout.splitlines()[-1])


def test_same_seed_same_cases_whatever_else_the_process_has_loaded(tmp_path):
    """Hypothesis would mix literals of loaded modules into draws; the tier switches that off."""
    literals = tmp_path / "local_literals.py"
    literals.write_text("NUMBERS = [" + ", ".join(str(n) for n in range(3, 4000, 7)) + "]\n")
    here = [[g.case.spec.name, g.case.mode, g.case.spec.model_dump()] for g in generated_tier(PROFILES["cpu"], 3, 40)]
    assert _generate_elsewhere(tmp_path, 3, 40) == json.loads(json.dumps(here))
    assert _generate_elsewhere(tmp_path, 3, 40, "import local_literals") == json.loads(json.dumps(here))
    assert _generate_elsewhere(tmp_path, 3, 20) == json.loads(json.dumps(here[:20]))  # more N extends
    assert _generate_elsewhere(tmp_path, 4, 40) != json.loads(json.dumps(here))


GENERATOR_MODULES = ("search/case_strategy.py", "search/draw_caps.py", "search/generated.py")


def test_no_generator_rule_names_a_seed_bug():
    from harness.bugs.seed_bugs import SEED_BUGS

    names = {bug_id for bug_id in SEED_BUGS} | {re.sub(r"\D", "", b.upstream) for b in SEED_BUGS.values()}
    for module in GENERATOR_MODULES:
        source = (ROOT / "harness" / module).read_text()
        assert "seed_bugs" not in source and "SEED_BUGS" not in source, module
        for name in names:
            assert name not in source, f"{module} names seed bug {name}"


def test_failure_class_masks_numbers_and_drops_where_a_detector_fired():
    eager = InvariantViolation("eager init_forward_metadata, step backend 0: kv_indptr decreases at row 2 (5 -> -3): "
                               "a negative per-request length")
    replay = InvariantViolation("replay init_forward_metadata_out_graph (bs 3 padded to 8), step backend 1: "
                                "kv_indptr decreases at row 7 (9 -> -1): a negative per-request length")
    assert str(of_exception(eager)) == str(of_exception(replay))
    assert str(of_exception(TypeError("'NoneType' object is not iterable"))) != str(of_exception(eager))
    assert str(of_exception(RuntimeError("size 12"))) == str(of_exception(RuntimeError("size 7")))
    assert of_exception(eager).failure_class == "invariant"
    assert of_exception(RuntimeError("CUDA error: an illegal memory access was encountered")).failure_class == "crash"


class FakeExecutor:
    """Fails like a bug that needs two requests and a dropped host mirror would; counts runs."""

    def __init__(self):
        self.runs = 0

    def run(self, drawn: DrawnCase) -> dict:
        self.runs += 1
        fields = drawn.fields
        if fields["bs"] >= 2 and fields["host_mirrors"] != "full":
            return dict(status="failed", failure="TypeError: x", message="TypeError: x")
        return dict(status="passed", failure=None, message="")


def test_a_failure_shrinks_to_the_smallest_case_failing_the_same_way(tmp_path):
    profile = PROFILES["cpu"]
    failing = next(g for g in generated_tier(profile, 0, 60)
                   if g.case.spec.bs >= 4 and g.case.spec.host_mirrors != "full")
    executor = FakeExecutor()
    first = executor.run(failing.draw.drawn)
    shrunk = shrink(failing, first, profile, 0, ["--replay", "some-bug"], tmp_path / "reproducers", 60, executor)
    (case,) = load_case_file(shrunk.case_file)
    assert (case.spec.bs, case.spec.host_mirrors) == (2, "gpu_only")  # what the failure needs, no more
    assert max(case.spec.prefix_lens) <= 3 and (case.spec.num_heads, case.spec.head_dim) == (1, 64)
    assert shrunk.failure == "TypeError: x"
    (cell,) = expand_cells([case])
    assert shrunk.rerun == (f"pytest 'harness/test_cases.py::test_cell[{cell.cell_id}]' --replay some-bug "
                            f"--cases-dir {tmp_path / 'reproducers'}")
    assert "Rerun: " + shrunk.rerun in shrunk.case_file.read_text()


def test_a_failing_mla_cell_shrinks_to_an_mla_case(tmp_path):
    """A bug both families meet (the fake one fails every family's gpu-only batch of two) shrinks within
    the failing cell's family: an MLA cell's reproducer is an MLA case file, never a dense one."""
    profile = PROFILES["cpu"]
    failing = next(g for g in generated_tier(profile, 0, 60)
                   if g.case.spec.model and g.case.spec.bs >= 2 and g.case.spec.host_mirrors != "full")
    executor = FakeExecutor()
    shrunk = shrink(failing, executor.run(failing.draw.drawn), profile, 0, [], tmp_path / "reproducers", 60,
                    executor)
    (case,) = load_case_file(shrunk.case_file)
    assert (case.spec.family, case.spec.model, case.spec.backends) == ("mla", "deepseek-v2-lite", ["triton_mla"])
    assert (case.spec.bs, case.spec.host_mirrors) == (2, "gpu_only")


def test_a_candidate_that_kills_or_stalls_the_worker_is_crashed_or_timed_out():
    drawn = generated_tier(PROFILES["cpu"], 0, 1)[0].draw.drawn
    crashing = CellExecutor([], timeout_s=30)
    crashing.command = [sys.executable, "-c", "import os, sys; sys.stdin.readline(); os._exit(11)"]
    assert crashing.run(drawn)["failure"] == CRASHED
    stalling = CellExecutor([], timeout_s=1)
    stalling.command = [sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(60)"]
    assert stalling.run(drawn)["failure"] == TIMED_OUT
    assert stalling.process is None


def test_pytest_option_adds_named_generated_cells(tmp_path):
    command = [sys.executable, "-m", "pytest", "harness/test_cases.py", "-p", "no:cacheprovider", "--co", "-q",
               "--generated", "5", "--generated-seed", "11", "--generated-only"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    ids = [line for line in done.stdout.splitlines() if "::test_cell[" in line]
    assert len(ids) == 5, done.stdout[-2000:]
    assert all(re.search(rf"\[({'|'.join(MODES)})-gen11-\d+-b\d+", i) for i in ids), ids
    assert "generated tier (cpu profile, seed 11): 5 cells drawn" in done.stdout
    assert not [i for i in ids if "-gen11-" not in i]  # --generated-only: no hand-made cell


def test_the_controller_draws_once_and_its_workers_build_the_same_cells_from_its_draws(monkeypatch, tmp_path):
    """pytest-xdist's workers wait for the controller's draws (a file in the run folder, written whole)
    and draw nothing themselves, nor walk a case for its traits: those come with the draws."""
    from types import SimpleNamespace

    from harness.case import case_traits
    from harness.search import generated_plugin

    monkeypatch.setattr(generated_plugin, "run_dir", lambda: tmp_path)
    options = {"--generated": 4, "--generated-seed": 11, "--generated-only": True, "--generated-profile": "cpu"}
    controller = SimpleNamespace(getoption=options.get, _attn_known=[], _attn_cells=[])
    text, _ = generated_plugin._draws(controller)
    assert generated_plugin._draws(controller)[0] is text  # drawn once
    assert [path.name for path in tmp_path.iterdir()] == [generated_plugin.DRAWS_FILE]

    def no_draw(*args, **kwargs):
        raise AssertionError("a worker drew")

    monkeypatch.setattr(generated_plugin, "distinct_draws", no_draw)
    monkeypatch.setattr(generated_plugin, "import_sglang", lambda: None)  # a GPU worker imports it while it waits
    worker = SimpleNamespace(getoption=options.get, _attn_known=[], _attn_cells=[], workerinput={})
    assert generated_plugin._draws(worker) == (text, 0.0)
    expected = [g.case for g in generated_tier(PROFILES["cpu"], 11, 4, known=[])]
    walked = {case_traits._content(case): case_traits.traits_of(case) for case in expected}
    monkeypatch.setattr(case_traits, "_FOUND", {})
    walking = case_traits.CaseTrait("walked", "holds wherever a case is walked", lambda case: True)
    monkeypatch.setattr(case_traits, "TRAITS", {walking.name: walking})
    built = [g.case for g in generated_plugin.tier_of(PROFILES["cpu"], 11, generated_plugin.draws_from_json(text))]
    assert built == expected
    assert {case_traits._content(case): case_traits.traits_of(case) for case in built} == walked


def test_a_worker_waits_for_the_controllers_draws(monkeypatch, tmp_path):
    """A worker that starts before the controller has drawn reads the file once it is there, whole."""
    import threading

    from harness.search import generated_plugin

    later = threading.Timer(0.3, lambda: (tmp_path / generated_plugin.DRAWS_FILE).write_text("[1, 2]"))
    later.start()
    try:
        assert generated_plugin._wait_for(tmp_path / generated_plugin.DRAWS_FILE) == "[1, 2]"
    finally:
        later.join()


def test_a_controller_removes_draws_an_earlier_run_left_before_its_workers_start(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from harness.search import generated_plugin

    monkeypatch.setattr(generated_plugin, "run_dir", lambda: tmp_path)
    stale = tmp_path / generated_plugin.DRAWS_FILE
    stale.write_text("[]")
    worker = SimpleNamespace(getoption={"--generated": 4}.get, workerinput={})
    generated_plugin.pytest_configure(worker)  # a worker leaves it: it is the controller's to write
    assert stale.exists()
    generated_plugin.pytest_configure(SimpleNamespace(getoption={"--generated": 4}.get))
    assert not stale.exists()


def test_passes_drawn_in_several_processes_are_the_draws_of_one(monkeypatch):
    """Each pass draws from its own seed, so drawing them in forked processes changes no draw."""
    from harness.search.generated import distinct_draws

    assert distinct_draws(PROFILES["cpu"], 3, 30, known=[], processes=2) == \
        distinct_draws(PROFILES["cpu"], 3, 30, known=[], processes=1)


def test_graph_runners_never_draw_a_batch_sglang_would_run_eagerly():
    largest = decode_capture_sizes(DEFAULT_DECODE_MAX_BS)[-1]
    for item in generated_tier(PROFILES["gpu"], 1, 120):
        (cell,) = expand_cells([item.case])
        assert cell.runner not in GRAPH_RUNNER_NAMES or item.case.spec.bs <= largest


def test_generated_budget_skips_cells_that_would_start_after_it():
    command = [sys.executable, "-m", "pytest", "harness/test_cases.py", "-p", "no:cacheprovider", "-q", "-rs",
               "--generated", "3", "--generated-only", "--generated-budget", "0.001"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert "3 skipped" in done.stdout, done.stdout[-2000:]
    assert "generated-tier budget of 0.001 s spent" in done.stdout
    assert "generated tier (cpu profile, seed 0): 3 cells drawn" in done.stdout


def test_a_failing_or_crashed_generated_cell_is_a_case_file_that_reruns_without_a_draw(harness_run):
    """Two drawn cells: one killed by a re-injected seed bug (a DRAFT_EXTEND_V2 graph cell under
    pr26651-seq-lens), one crashing its worker. Each is written to the run folder as a one-case file
    the strict loader takes, with a rerun line (the record's too) that names no drawing option; the
    failing one's rerun fails the same way in a fresh run that draws nothing. The shrunk reproducer
    lands in the same folder."""
    tier = generated_tier(PROFILES["cpu"], 0, 40)
    failing = next(g for g in tier if g.case.mode == "draft_extend_v2" and g.case.spec.runners == ["cg_meta"])
    crashing = next(g for g in tier if g.case.spec.runners == ["eager"] and g is not failing)
    (failing_cell,), (crashing_cell,) = expand_cells([failing.case]), expand_cells([crashing.case])
    count = max(failing.index, crashing.index) + 1
    done, folder, cells = harness_run(
        "harness/test_cases.py", "-n", "1", "--generated", str(count), "--generated-only", "--replay",
        "pr26651-seq-lens", "-k", f"{failing.case.spec.name}- or {crashing.case.spec.name}-", "--confirm-crashes",
        "0", "--shrink-budget", "10", env={FORCE_CRASH_ENV: crashing_cell.cell_id})
    assert done.returncode == 1, done.stdout[-3000:]
    assert {cell_id: cell["status"] for cell_id, cell in cells.items()} == {
        failing_cell.cell_id: "failed", crashing_cell.cell_id: "crashed"}, done.stdout[-3000:]
    written = folder / CASES_FOLDER
    for generated, cell in ((failing, failing_cell), (crashing, crashing_cell)):
        (case,) = load_case_file(written / f"{cell.cell_id}.yaml")
        assert (case.mode, case.spec) == (generated.case.mode, generated.case.spec)
        assert [c.cell_id for c in expand_cells([case])] == [cell.cell_id]
        rerun = cells[cell.cell_id]["rerun"]
        assert rerun == (f"pytest 'harness/test_cases.py::test_cell[{cell.cell_id}]' --replay pr26651-seq-lens "
                         f"--cases-dir {written.relative_to(ROOT)}")
        assert f"# Rerun (no hypothesis draw: on any machine where {cell.backend} runs): {rerun}" in \
            (written / f"{cell.cell_id}.yaml").read_text()
    report = json.loads((folder / "run.json").read_text())["generated"]
    assert {failure["cell"]: failure["rerun"] for failure in report["failures"]} == {
        cell_id: cells[cell_id]["rerun"] for cell_id in (failing_cell.cell_id, crashing_cell.cell_id)}
    [reproducer] = report["reproducers"]
    assert reproducer["case_file"].startswith(f"{written.relative_to(ROOT)}/")
    again, _, rerun_cells = harness_run(*shlex.split(cells[failing_cell.cell_id]["rerun"])[1:])
    assert "generated tier" not in again.stdout, again.stdout[-3000:]
    [(cell_id, cell)] = rerun_cells.items()
    assert (cell_id, cell["status"], cell["failure_class"]) == (
        failing_cell.cell_id, "failed", cells[failing_cell.cell_id]["failure_class"])


@pytest.mark.parametrize("profile, preset, budget", [("scale", None, "6"), ("scale", "4", "4"), ("gpu", None, None)])
def test_a_profile_with_larger_cells_brings_its_loader_budget(profile, preset, budget, monkeypatch):
    """The scale profile draws cells up to SCALE_CELL_GIB, over the loader's default budget: its run takes that
    budget unless the user set one; the GPU profile's fits the default and sets nothing."""
    from harness.case.case_limits import CELL_MEMORY_ENV
    from harness.search.generated_plugin import take_profile_budget

    monkeypatch.delenv(CELL_MEMORY_ENV, raising=False)
    if preset:
        monkeypatch.setenv(CELL_MEMORY_ENV, preset)
    take_profile_budget(PROFILES[profile].max_pool_bytes.limit)
    assert os.environ.get(CELL_MEMORY_ENV) == budget
