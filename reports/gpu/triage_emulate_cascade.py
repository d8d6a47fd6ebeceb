"""Emulate a two-part (cascade) attention whose partial outputs are rounded to bf16, on the
harness's own draws for a failing GPU cell, and report the census-head error it implies.

The draws must be the GPU run's, so this runs against the harness as it was then (the figures
in TRIAGE.md came from commit cd5d6eb; later commits changed run_cell's and build_state's
interfaces):

    git worktree add --detach /tmp/census-triage cd5d6eb
    PYTHONPATH=/tmp/census-triage python reports/gpu/triage_emulate_cascade.py \
        target_verify-tree-bs3-dtypebfloat16 6 small_real prefix
"""
import sys, torch
from harness.cases import load_all_cases
from harness.modes import MODES
from harness.kv_layout import build_layout
from harness.pools import build_state
from harness.forward_inputs import draw_inputs
from harness.run_cell import with_small_real_requests
from harness.key_census import census_heads
from harness.tolerances import CENSUS_TOLERANCES

case_id, capture_bs, padding, split = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
case = next(c for c in load_all_cases() if c.case_id == case_id)
mode = MODES[case.mode]
spec = with_small_real_requests(case.spec, capture_bs) if padding == "small_real" else case.spec
row_lens = mode.row_lens(spec)
layout = build_layout(spec.kv_layout, row_lens, spec.page_size, spec.seed, extra_rows=capture_bs)
state = build_state(spec, layout, row_lens, "cpu")
steps = mode.steps(spec)
scale = spec.head_dim ** -0.5
inputs = draw_inputs(state, steps, scale)
h = census_heads(spec.num_heads)[0]
kvh = h // (spec.num_heads // spec.num_kv_heads)
tol = CENSUS_TOLERANCES[spec.dtype]
bf = torch.bfloat16
for s, (step, inp) in enumerate(zip(steps, inputs)):
    worst = (0, None)
    for i, query in enumerate(step.queries):
        if query.request >= case.spec.bs:
            continue
        vis = list(query.visible)
        prefix = spec.prefix_lens[query.request] if split == "prefix" else None
        parts = ([p for p in vis if p < prefix], [p for p in vis if p >= prefix]) if prefix is not None else (vis,)
        v = state.row_v[query.request][:, kvh].to(torch.float64)
        num = torch.zeros(spec.head_dim, dtype=torch.float32)
        n_all = 0
        for part in parts:
            if not part:
                continue
            o = v[part].mean(0).to(torch.float32).to(bf).to(torch.float32)  # partial output in bf16
            num += o * len(part)
            n_all += len(part)
        merged = (num / n_all).to(bf).to(torch.float64)
        want = inp.expected[i, h]
        err = (merged - want).abs()
        bound = tol["atol"] + tol["rtol"] * want.abs()
        over = err > bound
        j = int(err.argmax())
        if err[j] > worst[0]:
            worst = (float(err[j]), step.labels[i], int(over.sum()), float(want[j]))
    print(f"{case_id} cbs{capture_bs} {padding} split={split} step {s}: worst census err {worst[0]:.3g} at {worst[1]} "
          f"(elements over bound there: {worst[2]}, ref {worst[3]:.3g})")
