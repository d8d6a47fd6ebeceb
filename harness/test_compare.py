"""The comparison: per-dtype bounds, NaN handling and where it says the worst element is."""

from __future__ import annotations

import pytest
import torch

from harness.compare import compare
from harness.tolerances import TOLERANCES

LABELS = ["request 0 draft token 0", "request 0 draft token 1", "request 1 draft token 0"]


def reference() -> torch.Tensor:
    return torch.linspace(-1, 1, 3 * 2 * 4, dtype=torch.float64).reshape(3, 2, 4)


@pytest.mark.parametrize("dtype", sorted(TOLERANCES))
def test_errors_just_inside_and_just_outside_the_bound(dtype):
    tol = TOLERANCES[dtype]
    ref = reference()
    bound = tol["atol"] + tol["rtol"] * ref.abs()
    inside = compare(ref + 0.99 * bound, ref, dtype, LABELS)
    assert inside.ok and inside.mismatch_frac == 0
    out = ref + 0.99 * bound
    out[2, 1, 3] = ref[2, 1, 3] + 1.01 * bound[2, 1, 3]
    outside = compare(out, ref, dtype, LABELS)
    assert not outside.ok
    assert outside.mismatch_frac == pytest.approx(1 / ref.numel())
    assert outside.worst == "request 1 draft token 0 head 1"


def test_worst_is_the_element_furthest_past_its_bound_not_the_largest_difference():
    """A large reference value allows a large absolute error (rtol); a small one does not."""
    ref = torch.zeros(3, 2, 4, dtype=torch.float64)
    ref[0, 0, 0] = 100.0
    out = ref.clone()
    out[0, 0, 0] += 0.4  # 0.4 against a bound of 0.505: inside
    out[1, 1, 2] += 0.01  # 0.01 against a bound of 0.005: outside
    found = compare(out, ref, "float32", LABELS)
    assert found.max_abs_err == pytest.approx(0.4)
    assert found.worst == "request 0 draft token 1 head 1"
    assert not found.ok


def test_nan_in_the_output_fails_and_is_named_worst():
    ref = reference()
    out = ref.clone()
    out[1, 0, 2] = float("nan")
    found = compare(out, ref, "bfloat16", LABELS)
    assert not found.ok and found.nan_count == 1
    assert found.worst == "request 0 draft token 1 head 0"
    assert found.max_abs_err == 0.0  # the finite elements are exact


def test_nan_in_the_reference_is_never_a_pass():
    ref = reference()
    out = ref.clone()
    ref[2, 0, 0] = float("nan")
    found = compare(out, ref, "float32", LABELS)
    assert not found.ok and found.nan_count == 1


def test_describe_names_figures_bounds_and_place():
    ref = reference()
    out = ref.clone()
    out[0, 1, 0] += 1.0
    text = compare(out, ref, "float16", LABELS).describe()
    assert text.startswith("max_abs_err=1 ")
    assert "mismatch=4.2% nan=0 (atol=0.005, rtol=0.005); worst at request 0 draft token 0 head 1" in text
