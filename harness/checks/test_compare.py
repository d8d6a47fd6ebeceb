"""The comparison: per-dtype bounds (the key-census head's far tighter), NaN handling, and where it
says the worst element is."""

from __future__ import annotations

import pytest
import torch

from harness.checks.compare import CENSUS_TOLERANCES, TOLERANCES, compare

LABELS = ["request 0 draft token 0", "request 0 draft token 1", "request 1 draft token 0"]
SCORED, CENSUS = 0, 2  # with 3 heads the last is the key-census head


def reference(heads: int = 3) -> torch.Tensor:
    return torch.linspace(-1, 1, 3 * heads * 4, dtype=torch.float64).reshape(3, heads, 4)


def bounds(ref: torch.Tensor, dtype: str) -> torch.Tensor:
    per_head = [TOLERANCES[dtype]] * (ref.shape[1] - 1) + [CENSUS_TOLERANCES[dtype]]
    atol = torch.tensor([t["atol"] for t in per_head], dtype=torch.float64).view(1, -1, 1)
    rtol = torch.tensor([t["rtol"] for t in per_head], dtype=torch.float64).view(1, -1, 1)
    return atol + rtol * ref.abs()


@pytest.mark.parametrize("dtype", sorted(TOLERANCES))
@pytest.mark.parametrize("head", [SCORED, CENSUS], ids=["scored-head", "census-head"])
def test_errors_just_inside_and_just_outside_the_bound(dtype, head):
    ref = reference()
    bound = bounds(ref, dtype)
    inside = compare(ref + 0.99 * bound, ref, dtype, LABELS)
    assert inside.ok and inside.mismatch_frac == 0
    out = ref + 0.99 * bound
    out[2, head, 3] = ref[2, head, 3] + 1.01 * bound[2, head, 3]
    outside = compare(out, ref, dtype, LABELS)
    assert not outside.ok
    assert outside.mismatch_frac == pytest.approx(1 / ref.numel())
    assert outside.census_mismatch_frac == (pytest.approx(1 / 12) if head == CENSUS else 0)
    assert outside.worst == f"request 1 draft token 0 head {head}" + (" (key census)" if head == CENSUS else "")


def test_census_bound_is_far_tighter_than_the_scored_bound():
    """The H200's one-wrong-key error (0.018) passes a scored head's bf16 bound, not the census head's."""
    ref = reference()
    out = ref.clone()
    out[:, SCORED] += 0.018
    assert compare(out, ref, "bfloat16", LABELS).ok
    out = ref.clone()
    out[0, CENSUS, 0] += 0.018
    assert not compare(out, ref, "bfloat16", LABELS).ok


def test_a_single_head_has_no_census():
    ref = reference(heads=1)
    found = compare(ref + 0.004, ref, "float32", LABELS)
    assert found.ok and found.census_mismatch_frac == 0 and "(key census)" not in found.worst


def test_worst_is_the_element_furthest_past_its_bound_not_the_largest_difference():
    """A large reference value allows a large absolute error (rtol); a small one does not."""
    ref = torch.zeros(3, 2, 4, dtype=torch.float64)
    ref[0, 0, 0] = 100.0
    out = ref.clone()
    out[0, 0, 0] += 0.4  # 0.4 against a bound of 0.505: inside
    out[1, 0, 2] += 0.01  # 0.01 against a bound of 0.005: outside
    found = compare(out, ref, "float32", LABELS)
    assert found.max_abs_err == pytest.approx(0.4)
    assert found.worst == "request 0 draft token 1 head 0"
    assert not found.ok


@pytest.mark.parametrize("side", ["output", "reference"])
def test_nan_on_either_side_fails_and_is_named_worst(side):
    """A NaN output is a failure; a NaN reference (a harness bug) must never pass either."""
    ref = reference()
    out = ref.clone()
    (out if side == "output" else ref)[1, 0, 2] = float("nan")
    found = compare(out, ref, "bfloat16", LABELS)
    assert not found.ok and found.nan_count == 1
    assert found.worst == "request 0 draft token 1 head 0"
    assert found.max_abs_err == 0.0  # the finite elements are exact


def test_describe_names_figures_bounds_and_place():
    ref = reference()
    out = ref.clone()
    out[0, 1, 0] += 1.0
    assert compare(out, ref, "float16", LABELS).describe() == (
        "max_abs_err=1 max_rel_err=1.3 mismatch=2.8% (key census 0.0%) nan=0 (atol=0.005, rtol=0.005; "
        "key census atol=0.000244141, rtol=0.00195312); worst at request 0 draft token 0 head 1")
