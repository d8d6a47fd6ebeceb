"""The key-census probe's arithmetic, on CPU with synthetic tensors: key counts read from LSEs, which
keys each partial holds, half-ulps, the bounds, the merge recording and the report table. One real
cell (Triton, cg_meta) checks the plumbing through run_cell's prepared batches and replays."""

from __future__ import annotations

import math
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from harness.probes import census_probe
from harness.probes.census_probe import (DRAFT, PREFIX, MergeSite, Partial, assign_parts, half_ulps, key_counts,
                                  query_figures, recorded_merges, table_rows)
from harness.probes.controls import matrix_cell
from harness.modes import TARGET_VERIFY

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
FAKE_MODULE = "harness_test_fake_merge"


def test_key_counts_are_the_lse_to_its_base_and_an_empty_part_holds_none():
    counts = key_counts(torch.tensor([math.log(7), math.log2(300), math.inf, -math.inf]), math.e)
    assert counts[0] == pytest.approx(7) and counts[2:].tolist() == [0, 0]
    assert key_counts(torch.tensor([math.log2(300)]), 2.0).item() == pytest.approx(300)


def test_parts_are_read_from_their_counts_in_either_order_and_a_count_off_by_one_is_none():
    expected = {PREFIX: 9, DRAFT: 3}
    assert assign_parts([9.0, 3.0], expected, (PREFIX, DRAFT)) == (PREFIX, DRAFT)
    assert assign_parts([3.0, 9.0], expected, (PREFIX, DRAFT)) == (DRAFT, PREFIX)
    assert assign_parts([4.0, 4.0], {PREFIX: 4, DRAFT: 4}, (DRAFT, PREFIX)) == (DRAFT, PREFIX)  # a tie: as declared
    assert assign_parts([9.0, 4.0], expected, (PREFIX, DRAFT)) is None


def test_rounding_to_nearest_is_at_most_one_half_ulp_and_one_ulp_off_is_two():
    exact = torch.randn(10_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    rounded = exact.to(torch.bfloat16).double()
    assert half_ulps((rounded - exact).abs(), exact, torch.bfloat16).max() <= 1
    away = rounded.sign().to(torch.bfloat16) * math.inf  # away from zero: the ulp of the value's own binade
    one_off = torch.nextafter(rounded.to(torch.bfloat16), away).double()
    assert half_ulps((one_off - rounded).abs(), rounded, torch.bfloat16).min() >= 1.99


def _cascade(v: torch.Tensor, prefix_keys: list[int], draft_keys: list[int]):
    """Two-part attention of the census head as FA's cascade stores it: each part's mean of V rounded
    to bf16 with LSE ln(count), merged in fp32, rounded again."""
    parts = [v[keys].double().mean(dim=0).to(torch.bfloat16) for keys in (prefix_keys, draft_keys)]
    lses = [math.log(len(keys)) for keys in (prefix_keys, draft_keys)]
    weights = torch.softmax(torch.tensor(lses), dim=0).tolist()
    merged = (weights[0] * parts[0].float() + weights[1] * parts[1].float()).to(torch.bfloat16)
    return merged, [Partial(p.float(), lse, torch.bfloat16, math.e) for p, lse in zip(parts, lses)]


def _query(v, prefix: int, ancestors: list[int]):
    attended = [*range(prefix), *(prefix + a for a in ancestors)]
    ref = v[attended].double().mean(dim=0)
    return attended, ref


def test_bf16_partials_alone_exceed_the_census_bound_and_the_rounding_model_covers_them():
    """The suspected cause of the H200 census failures, on CPU: a correct two-part kernel over few keys."""
    worst = dict(census_x=0.0, model_x=0.0, plain_x=0.0, half_ulps=0.0)
    for seed in range(200):
        v = (torch.randn(8, HEAD_DIM, generator=torch.Generator().manual_seed(seed)) * 1.5).to(torch.bfloat16)
        attended, ref = _query(v, prefix=1, ancestors=[0, 2])
        out, partials = _cascade(v, [0], [1, 3])
        figures = query_figures(v, attended, 1, ref, out.float(), "bfloat16", partials, (PREFIX, DRAFT), [2, 4])
        assert [part["holds"] for part in figures["parts"]] == [PREFIX, DRAFT]
        worst = {name: max(value, *(p.get(name, 0) for p in figures["parts"])) if name == "half_ulps"
                 else max(value, figures[name]) for name, value in worst.items()}
    assert worst["census_x"] > 1, worst
    assert worst["half_ulps"] <= 1 and worst["model_x"] <= 1 and worst["plain_x"] <= 1, worst


def test_a_missing_key_is_an_unexpected_count_and_a_wrong_key_is_far_outside_its_half_ulp():
    v = torch.randn(40, HEAD_DIM, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    attended, ref = _query(v, prefix=30, ancestors=[0, 1, 3])
    out, partials = _cascade(v, list(range(30)), [31, 33])  # the draft part lost position 30
    figures = query_figures(v, attended, 30, ref, out.float(), "bfloat16", partials, (PREFIX, DRAFT), [32])
    assert [part["holds"] for part in figures["parts"]] == [None, None]
    assert figures["parts"][1]["expected"] == {PREFIX: 30, DRAFT: 3}
    out, partials = _cascade(v, list(range(30)), [30, 31, 32])  # position 32 read in place of 33
    figures = query_figures(v, attended, 30, ref, out.float(), "bfloat16", partials, (PREFIX, DRAFT), [32])
    assert figures["parts"][0]["half_ulps"] <= 1 and figures["parts"][1]["half_ulps"] > 20
    assert figures["census_x"] > 1 and figures["model_x"] > 1


def test_a_replay_is_measured_beside_the_eager_output():
    v = torch.randn(12, HEAD_DIM, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    attended, ref = _query(v, prefix=8, ancestors=[0, 1])
    out, partials = _cascade(v, list(range(8)), [8, 9])
    off = out.float() + 0.25  # a replay that read something else
    figures = query_figures(v, attended, 8, ref, out.float(), "bfloat16", partials, (PREFIX, DRAFT), [10],
                            replay=off)
    assert figures["replay_vs_eager"] == 0.25 and figures["replay_census_x"] > 10 and figures["replay_plain_x"] > 10
    assert figures["census_x"] < figures["replay_census_x"]


def test_the_one_wrong_key_signal_is_the_least_change_among_the_candidates():
    v = torch.zeros(4, 2, dtype=torch.float64)
    v[0], v[1], v[3] = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.5])
    signal, in_bounds = census_probe.wrong_key_signal(v[:2], v[3:], torch.full((2,), 0.25))
    assert signal == pytest.approx(0.5 / 2) and in_bounds == pytest.approx(1.0)  # V_0 vs V_3: 0.5 / 2 keys


@pytest.fixture
def fake_merge_site(monkeypatch):
    """A module whose merge function sglang's backends would call: merges in fp32, as sgl_kernel's does."""
    module = ModuleType(FAKE_MODULE)

    def merge_state_v2(v_a, s_a, v_b, s_b):
        w_a = torch.sigmoid(s_a - s_b)[..., None]
        return (w_a * v_a.float() + (1 - w_a) * v_b.float()).to(v_a.dtype), torch.logaddexp(s_a, s_b)

    module.merge_state_v2 = merge_state_v2
    monkeypatch.setitem(sys.modules, FAKE_MODULE, module)
    return MergeSite(FAKE_MODULE, "merge_state_v2", math.e, (PREFIX, DRAFT), "test")


def test_recording_copies_the_census_head_and_puts_the_function_back(fake_merge_site):
    module = sys.modules[FAKE_MODULE]
    original = module.merge_state_v2
    v_a, v_b = torch.randn(5, HEADS, HEAD_DIM).to(torch.bfloat16), torch.randn(5, HEADS, HEAD_DIM).to(torch.bfloat16)
    s_a, s_b = torch.full((5, HEADS), math.log(3)), torch.full((5, HEADS), math.log(2))
    with recorded_merges((fake_merge_site,), head=HEADS - 1) as merges:
        merged, _ = module.merge_state_v2(v_a, s_a, v_b, s_b)
    assert module.merge_state_v2 is original
    assert torch.equal(merged, original(v_a, s_a, v_b, s_b)[0])
    v_a.zero_()  # a kernel reusing the buffer later must not change what was recorded
    (merge,) = merges
    assert merge.dtype == torch.bfloat16 and merge.outs[0].dtype == torch.float32
    assert torch.equal(merge.outs[1], v_b[:, -1].float()) and bool((merge.outs[0] != 0).any())
    assert merge.partials(2)[0].lse == pytest.approx(math.log(3))


def _verify_batch(prefix_lens: list[int]):
    """A target_verify tree batch as run_cell prepares it (the fields the probe reads), V per request."""
    from harness.case.cases import spec_from_fields

    spec = spec_from_fields(dict(name="probe", bs=len(prefix_lens), prefix_lens=prefix_lens, input_lens=5, topk=2,
                                 num_steps=3, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                                 dtype="bfloat16"))
    gen = torch.Generator().manual_seed(2)
    row_v = [torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
             for n in TARGET_VERIFY.row_lens(spec)]
    steps = TARGET_VERIFY.steps(spec)
    expected = torch.zeros(len(steps[0].queries), HEADS, HEAD_DIM, dtype=torch.float64)
    for row, query in enumerate(steps[0].queries):
        expected[row, -1] = row_v[query.request][list(query.positions()), -1].double().mean(dim=0)
    return SimpleNamespace(run=SimpleNamespace(spec=spec, real_bs=spec.bs, extra=False), steps=steps,
                           inputs=[SimpleNamespace(expected=expected)], state=SimpleNamespace(row_v=row_v))


def _cascade_forward(batch, site: MergeSite) -> torch.Tensor:
    """What FA's cascade forward does with the census head, calling the merge through its module."""
    queries = batch.steps[0].queries
    parts = torch.zeros(2, len(queries), HEADS, HEAD_DIM, dtype=torch.bfloat16)
    lses = torch.zeros(2, len(queries), HEADS)
    for row, query in enumerate(queries):
        prefix = batch.run.spec.prefix_lens[query.request]
        keys = list(query.positions())
        for index, part in enumerate(([p for p in keys if p < prefix], [p for p in keys if p >= prefix])):
            parts[index, row, -1] = batch.state.row_v[query.request][part, -1].double().mean(dim=0).to(torch.bfloat16)
            lses[index, row, -1] = math.log(len(part))
    merged, _ = getattr(sys.modules[site.module], site.function)(parts[0], lses[0], parts[1], lses[1])
    return merged.reshape(len(queries), -1)


def test_each_forwards_merge_is_matched_with_its_queries(fake_merge_site):
    batch = _verify_batch([9, 1, 40])
    with recorded_merges((fake_merge_site,), head=HEADS - 1) as merges:
        eager = [_cascade_forward(batch, fake_merge_site)]
    found = census_probe._batch_figures(batch, eager, None, merges, head=HEADS - 1)
    assert "problem" not in found and len(found["queries"]) == 15
    for query in found["queries"]:
        assert [part["holds"] for part in query["parts"]] == [PREFIX, DRAFT], query
        assert max(part["half_ulps"] for part in query["parts"]) <= 1 and query["model_x"] <= 1, query
    found = census_probe._batch_figures(batch, eager, None, merges * 2, head=HEADS - 1)
    assert found["problem"].startswith("2 merges of [15, 15] rows for 1 forwards")
    assert all("parts" not in query for query in found["queries"])


def _record(backend: str, parts: list[dict], **figures) -> dict:
    query = dict(query="q", request=0, compared=True, keys=3, err=0.004, census_x=2.0, model_x=0.8, plain_x=0.5,
                 signal=0.3, signal_x=40.0, parts=parts)
    query.update(figures)
    return dict(cell_id=f"{backend}-cell", backend=backend, mode="target_verify", draft_shape="tree",
                runner="eager", dtype="bfloat16", batches=[dict(label="eager", merges=1, queries=[query])])


def test_the_table_reads_each_row_and_lists_cells_without_figures():
    held = [dict(holds=PREFIX, keys=1.0, lse=0.0, err=0.002, half_ulps=0.9),
            dict(holds=DRAFT, keys=2.0, lse=0.69, err=0.003, half_ulps=1.0)]
    lost = [dict(holds=None, keys=1.0, lse=0.0, expected={PREFIX: 1, DRAFT: 3}), held[1]]
    cells = [_record("fa3", held), _record("flashinfer", lost), _record("triton", [], model_x=3.0),
             _record("fa4", held, replay_err=0.02, replay_census_x=9.0, replay_plain_x=1.5, replay_vs_eager=0.016),
             dict(cell_id="fa4-skipped", backend="fa4", mode="target_verify", draft_shape="tree", runner="eager",
                  dtype="bfloat16", skipped="fa4 needs a CUDA GPU")]
    rows = {row["backend"]: row for row in table_rows(cells)}
    assert rows["fa3"]["reading"] == "rounding of the partials" and rows["fa3"]["over"] == 1
    assert rows["flashinfer"]["reading"] == "WRONG KEY COUNT" and rows["flashinfer"]["unexpected"] == 1
    assert rows["triton"]["reading"] == "beyond the rounding model (no merge seen)"
    assert rows["fa4"]["reading"] == ("rounding of the partials; the replay differs from eager, beyond the plain "
                                      "bound") and rows["fa4"]["replay_over"] == 1
    text = census_probe.markdown(list(rows.values()), cells, "tree")
    fa3 = "| fa3 | target_verify | tree | eager | 1 | 1 | 1 | 1 | 0.004 | 2 | 0.8 | 0.5 | 1 | 0 | 40 | - | - | - |"
    assert fa3 in text
    assert "- fa4-skipped: fa4 needs a CUDA GPU" in text


def test_without_a_gpu_the_command_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    """(Its usage errors are rows of harness/base/test_cli_errors.py.)"""
    monkeypatch.setattr(census_probe.platform, "HAS_GPU", False)
    assert census_probe.main(["-k", "target_verify-tree-bs3 and fa3", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a CUDA GPU (this machine has none)" in err


def test_a_real_cell_every_batch_eager_and_replayed():
    """Triton's graph form on CPU (cg_meta): both batches, each query against its replay; Triton merges
    nothing sglang's Python sees, so there are no parts."""
    record = census_probe.probe_cell(matrix_cell("target_verify-tree-bs3-dtypefloat32-triton-cg_meta-cbs3-nopad"))
    assert record["merge_sites"] == [] and [b["extra"] for b in record["batches"]] == [False, True]
    for batch in record["batches"]:
        assert batch["merges"] == 0 and batch["queries"]
        for query in batch["queries"]:
            assert query["census_x"] < 1 and "parts" not in query, query
            assert query["replay_vs_eager"] == 0 and query["replay_err"] == query["err"], query
