"""What the profiles draw: the GPU's head shapes, dtypes and windows as production serves them, so
that cells share compiled kernels, with the window's boundary kept in the prefixes; the CPU's exactly
what it drew before (CI runs a fixed-seed CPU tier, whose draws must not move); the scale tier's
batches and widths past what the GPU profile reaches."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import Phase, find, given, settings

from harness import ROOT
from harness.base import platform
from harness.families import BACKENDS
from harness.search.case_strategy import SMALLEST_MODEL_WINDOW, _batch_size, _model_window
from harness.case.cases import spec_from_fields
from harness.case.case_limits import CELL_MEMORY_ENV
from harness.runners import RUNNER_FORMS
from harness.search.draw_caps import GPU, PROFILES, SCALE, SCALE_CELL_GIB, SERVED_MODELS, cell_cost, machine_runs
from harness.search.generated import distinct_draws
from harness.modes import MODES
from harness.base.releases import installed
from harness.speed.warmup import KERNEL_FIELDS

CPU_DRAWS = ROOT / "harness" / "testdata" / "cpu_profile_draws.json"
DRAWS = 200


def test_the_cpu_profile_draws_what_it_drew_before_the_gpu_profile_took_served_models():
    recorded = json.loads(CPU_DRAWS.read_text())
    keys = recorded["keys"].get(installed().version)
    if keys is None or [list(run) for run in machine_runs()] != recorded["machine_runs"]:
        pytest.skip(f"{CPU_DRAWS.name} holds draws of sglang {', '.join(recorded['keys'])} on a machine "
                    f"running {recorded['machine_runs']}")
    drawn = distinct_draws(PROFILES["cpu"], recorded["seed"], len(keys), known=[])
    assert json.loads(json.dumps([draw.drawn.key for draw in drawn])) == keys


@pytest.fixture(scope="module")
def gpu_draws():
    """The GPU profile's first distinct draws (drawing needs no GPU), as (mode, spec)."""
    return [(MODES[draw.drawn.mode], spec_from_fields(draw.drawn.fields))
            for draw in distinct_draws(GPU, 0, DRAWS, known=[])]


@pytest.fixture(scope="module")
def gpu_specs(gpu_draws):
    return [spec for _, spec in gpu_draws]


def _model_windows(windows: tuple[int, ...]) -> set[int]:
    return {0, *windows, SMALLEST_MODEL_WINDOW} if any(windows) else {0}


def test_gpu_draws_take_heads_and_windows_from_served_models(gpu_specs):
    for spec in (spec for spec in gpu_specs if not spec.model):  # dense; other families: below
        shape = (spec.num_heads, spec.num_kv_heads, spec.head_dim)
        models = [m for m in SERVED_MODELS if (m.num_heads, m.num_kv_heads, m.head_dim) == shape]
        assert models, f"{shape} is no served model's"
        assert any(spec.sliding_window in _model_windows(m.sliding_windows) for m in models), spec
        assert spec.sliding_window < spec.context_len
    assert {spec.sliding_window for spec in gpu_specs} - {0, SMALLEST_MODEL_WINDOW}  # served windows drawn


def test_gpu_draws_take_other_families_from_their_served_shards(gpu_specs):
    """An MLA draw is one served model's shard (model and one GPU's heads), never a dense head shape."""
    shards = {(shard.family, *dict(shard.fields).values()) for shard in GPU.family_shards}
    drawn = {(spec.family, spec.model, spec.num_heads) for spec in gpu_specs if spec.model}
    assert drawn and drawn <= shards, drawn - shards


def test_gpu_draws_are_mostly_bf16_where_the_backend_runs_it(gpu_specs):
    """Triton's CPU interpreter runs no bf16, so off a GPU those draws are redrawn: counted without them."""
    runs_bf16 = [spec for spec in gpu_specs if platform.HAS_GPU or not BACKENDS[spec.backends[0]].triton_kernels]
    dtypes = Counter(spec.dtype for spec in runs_bf16)
    assert dtypes["bfloat16"] > len(runs_bf16) / 2 and {"float16", "float32"} <= dtypes.keys(), dtypes


def test_gpu_draws_share_kernel_configurations(gpu_specs):
    """The free product of head counts, head dims, dtypes and windows gave 168-175 distinct tuples of the
    fields kernels compile per in 200 draws (here and on a GPU); served models give 70-95 (the most here,
    where Triton's interpreter takes no bf16)."""
    configurations = {tuple(getattr(spec, name) for name in KERNEL_FIELDS) for spec in gpu_specs}
    assert len(configurations) <= DRAWS * 3 // 5, len(configurations)


def test_gpu_draws_cut_rows_with_served_windows_cover_them_and_put_prefixes_at_the_edge(gpu_draws):
    """A served window covers every row of some draws and cuts rows of others, and some draws put a
    prefix just below, at or just above it (test_model_windows_reach_each_edge finds each)."""
    served = [(mode, spec) for mode, spec in gpu_draws if spec.sliding_window > SMALLEST_MODEL_WINDOW]
    covered = Counter(max(mode.row_lens(spec)) <= spec.sliding_window for mode, spec in served)
    assert covered[True] and covered[False], covered
    assert any(abs(prefix - spec.sliding_window) <= 1 for _, spec in served for prefix in spec.prefix_lens)


@pytest.mark.parametrize("offset", (-1, 0, 1))
def test_model_windows_reach_each_edge(offset):
    """With few production windows the boundary is in the prefixes: one request's just below, at and
    just above the window."""
    window = 128
    strategy = _model_window((0, window), 8192, [1, 3, 4000], reach=4, shortest=1, wall=8192)
    drawn = find(strategy, lambda drawn: window + offset in drawn["prefix_lens"],
                 settings=settings(database=None, derandomize=True, phases=[Phase.generate]))
    assert drawn["sliding_window"] == window


@settings(database=None, derandomize=True, max_examples=60)
@given(_model_window((0, 4096, 8192), 8192, [1, 5, 4000], reach=8, shortest=1, wall=4096))
def test_a_window_as_long_as_the_context_is_none_and_edge_prefixes_stay_within_the_mode_and_the_wall(drawn):
    assert drawn["sliding_window"] in (0, SMALLEST_MODEL_WINDOW, 4096)
    assert all(1 <= prefix <= 4096 for prefix in drawn["prefix_lens"])


SCALE_DRAWS = 24


@pytest.fixture(scope="module")
def scale_draws():
    """The scale profile's first distinct draws, with the cell budget it is run with (drawing needs no GPU)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CELL_MEMORY_ENV, str(SCALE_CELL_GIB))
        return [(MODES[draw.drawn.mode], spec_from_fields(draw.drawn.fields))
                for draw in distinct_draws(SCALE, 0, SCALE_DRAWS, known=[])]


def test_scale_draws_reach_production_batches_and_widths_eagerly_above_the_capture_sizes(scale_draws):
    """Batches past sglang's largest capture size (eager only, as sglang runs them), every req_to_token width
    of the profile, and every cell within the memory its workers share."""
    largest_capture = SCALE.capture_sizes[-1]
    above = [spec for _, spec in scale_draws if spec.bs > largest_capture]
    assert above and all(not RUNNER_FORMS[spec.runners[0]].graph for spec in above)
    assert {spec.context_len for _, spec in scale_draws} == set(SCALE.context_lens)
    for mode, spec in scale_draws:
        cost = cell_cost(mode, spec, RUNNER_FORMS[spec.runners[0]].graph)
        assert cost.pool_bytes <= SCALE_CELL_GIB << 30 and cost.over(SCALE) is None, (spec, cost)


def test_scale_batches_reach_1024():
    assert find(_batch_size(SCALE), lambda bs: bs == SCALE.max_bs.limit == 1024,
                settings=settings(database=None, derandomize=True, phases=[Phase.generate])) == 1024
