"""Compare a backend's output with the reference and say plainly what differs.

The one place for the tolerances per dtype, the key-census head and the comparison that holds
every element to its bound. An element mismatches when |out - ref| > atol + rtol * |ref|; any
mismatch or NaN fails the cell. fp32 allows for tf32 matmuls in GPU kernels (Triton's default
fp32 dot on Hopper: 2.7e-3 max abs error measured on an H200); the seed bugs this harness hunts
produce errors of order 0.1-1, far above every bound here.

Key census: one query head drawn as zero, whose output is the plain mean of V over what it
attends. With q = 0 every score is 0, so the softmax weights are exactly uniform (exp(0) = 1:
no rounding of P anywhere) and the head's output is the mean of V over the attended set.
Attending one wrong key among n moves some element of that mean by |V_a - V_b| / n (about
3.5 / n over 64 dimensions of unit-normal V; a missing or extra key moves it by about as much),
while a correct kernel errs only by rounding the mean to the output dtype. Compared at
CENSUS_TOLERANCES one wrong key is unmistakable where the ordinary tolerance lets it through: on
an H200 a bf16 replay that attended one wrong key of 257 passed with error 0.018 against a
tolerance of 0.03. The census costs no extra forward: it is the last query head of every draw
(reading the last KV head; a wrong slot is wrong in every KV head), and the other heads keep
random scores. A model with one head has no census head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TOLERANCES = {
    "float32": {"atol": 5e-3, "rtol": 5e-3},
    "float16": {"atol": 5e-3, "rtol": 5e-3},
    "bfloat16": {"atol": 3e-2, "rtol": 3e-2},
}

# The key-census head: a correct kernel errs only by rounding. rtol is one output ulp (bf16 2^-7;
# fp16 two ulps, 2^-9, for split-KV merges of fp16 partial outputs); atol covers fp32
# accumulation and partial outputs of magnitude <= 0.25 stored in bf16 (2^-10) or fp16 (2^-12)
# before the merge; fp32 allows for tf32 rounding of V in GPU dots (2^-11 relative, 2^-9 with
# margin). One wrong key among n moves some element by about 3.5 / n: 0.0136 at n = 257, at
# least 6.9 times the bf16 bound over 200 draws of unit-normal V (head_dim 64); detection holds
# to about 2000 attended keys in bf16 and 1000 in fp32.
CENSUS_TOLERANCES = {
    "float32": {"atol": 2**-9, "rtol": 2**-10},
    "float16": {"atol": 2**-12, "rtol": 2**-9},
    "bfloat16": {"atol": 2**-10, "rtol": 2**-7},
}


# Kernels that attend in parts (sglang's cascade and ragged+paged paths, split-KV partials) store
# each part's normalised output in the output dtype before the LSE merge, so each part carries up
# to half an output ulp of its own magnitude into the result, weighted by its share of keys:
# |error| <= HALF_ULP[dtype] * sum_i w_i |p_i| elementwise, p_i the mean of V over part i (the
# census head's parts are plain means). Where a backend declares such merges
# (harness/fixtures/backends.py PartialMerge) that sum is added to the census bound per element; what the
# kernels really do was measured on an H200 (python -m harness.probes.census_probe, docs/detectors.md).
HALF_ULP = {"float32": 2**-24, "float16": 2**-11, "bfloat16": 2**-8}

# Two runs of a deterministic kernel on the same request (sglang's --enable-deterministic-inference
# promises batch invariance): any difference at all is a finding, so every bound is zero.
BITWISE = {"atol": 0.0, "rtol": 0.0}


def census_slice(num_heads: int) -> slice:
    """The key-census head: the last query head, when the model has more than one. A slice, so that
    indexing a device tensor with it is a view (a list index is copied to the GPU first)."""
    return slice(num_heads - 1, num_heads) if num_heads > 1 else slice(0, 0)


def census_heads(num_heads: int) -> list[int]:
    """census_slice's heads as a list, for what the host does with them (names, loops)."""
    return list(range(num_heads))[census_slice(num_heads)]


def scored_slice(num_heads: int) -> slice:
    """The heads other than the key-census head (they lead: the census head is the last)."""
    return slice(0, census_slice(num_heads).start or num_heads)


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float  # over finite elements
    max_rel_err: float
    mismatch_frac: float  # over all heads
    nan_count: int  # elements where the output (or, a harness bug, the reference) is NaN
    worst: str  # the element furthest past (or nearest to) its bound, in the reader's terms
    atol: float
    rtol: float
    census_mismatch_frac: float  # over the key-census head (0 when there is none)
    scored_mismatch_frac: float  # over the other heads, whose queries have random scores
    census_atol: float
    census_rtol: float

    @property
    def ok(self) -> bool:
        return self.mismatch_frac == 0.0 and self.nan_count == 0

    def describe(self) -> str:
        return (f"max_abs_err={self.max_abs_err:.3g} max_rel_err={self.max_rel_err:.3g} "
                f"mismatch={self.mismatch_frac:.1%} (key census {self.census_mismatch_frac:.1%}) "
                f"nan={self.nan_count} (atol={self.atol:g}, rtol={self.rtol:g}; key census "
                f"atol={self.census_atol:g}, rtol={self.census_rtol:g}); worst at {self.worst}")


@dataclass(frozen=True)
class CellResult:
    """One cell's comparisons (harness/cell/run_cell.py), and what they add up to."""

    comparisons: dict[str, Comparison]  # "what vs what, step i" -> comparison
    phase_s: dict[str, float]  # wall seconds per phase (harness/base/results.py)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons.values())

    @property
    def worst(self) -> Comparison:
        return max(self.comparisons.values(), key=lambda c: (not c.ok, c.mismatch_frac, c.max_abs_err))

    def describe(self) -> str:
        bad = [f"{name}: {c.describe()}" for name, c in self.comparisons.items() if not c.ok]
        return "; ".join(bad) or self.worst.describe()


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: str, labels: list[str],
            census_slack: torch.Tensor | None = None, bitwise: bool = False) -> Comparison:
    """out, ref: [num_queries, num_heads, head_dim]; labels name each query row.

    An element mismatches when |out - ref| > atol + rtol * |ref| or either is
    NaN, with the key-census head held to CENSUS_TOLERANCES; the worst element
    is the one with the largest |out - ref| / bound. ``census_slack`` [queries, head_dim], where
    given, widens the census head's bound per element (the partial-merge rounding above).
    Computed in float64 on the reference's device; only the figures come back to the host.
    ``bitwise``: every bound is zero (BITWISE), for two outputs a deterministic kernel must make equal.
    """
    tol, census_tol = (BITWISE, BITWISE) if bitwise else (TOLERANCES[dtype], CENSUS_TOLERANCES[dtype])
    census, scored = census_slice(out.shape[1]), scored_slice(out.shape[1])
    atol = torch.full((1, out.shape[1], 1), tol["atol"], dtype=torch.float64, device=ref.device)
    rtol = torch.full((1, out.shape[1], 1), tol["rtol"], dtype=torch.float64, device=ref.device)
    atol[:, census], rtol[:, census] = census_tol["atol"], census_tol["rtol"]

    out64 = out.detach().to(ref.device, torch.float64)
    diff = (out64 - ref).abs()
    nan = torch.isnan(diff)
    # never zero (a bitwise comparison's bounds are): a difference's excess stays finite and ranks the worst
    bound = (atol + rtol * ref.abs()).clamp_min(torch.finfo(torch.float64).tiny)
    has_census = census.stop > census.start
    if census_slack is not None and has_census:
        bound[:, census.start] += census_slack
    excess = torch.where(nan, torch.full_like(diff, float("inf")), diff / bound)
    finite = torch.isfinite(diff)
    rel = diff / ref.abs().clamp_min(1e-6)
    mismatched = (excess > 1).double()
    figures = torch.stack([
        torch.argmax(excess).double(),
        torch.where(finite, diff, -1.0).max(),
        torch.where(finite, rel, -1.0).max(),
        finite.any().double(), mismatched.mean(), nan.sum().double(),
        mismatched[:, census].mean() if has_census else torch.zeros((), dtype=torch.float64, device=ref.device),
        mismatched[:, scored].mean(),
    ]).tolist()  # one transfer to the host
    worst_index, max_abs, max_rel, any_finite, mismatch_frac, nan_count, census_frac, scored_frac = figures
    row, head, _ = torch.unravel_index(torch.tensor(int(worst_index)), diff.shape)
    return Comparison(
        max_abs_err=max_abs if any_finite else float("nan"),
        max_rel_err=max_rel if any_finite else float("nan"),
        mismatch_frac=mismatch_frac,
        nan_count=int(nan_count),
        worst=f"{labels[int(row)]} head {int(head)}{' (key census)' if int(head) in census_heads(out.shape[1]) else ''}",
        atol=tol["atol"], rtol=tol["rtol"],
        census_mismatch_frac=census_frac,
        scored_mismatch_frac=scored_frac,
        census_atol=census_tol["atol"], census_rtol=census_tol["rtol"],
    )
