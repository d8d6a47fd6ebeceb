"""Compare a backend's output with the reference and say plainly what differs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.key_census import census_heads
from harness.tolerances import CENSUS_TOLERANCES, TOLERANCES


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


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: str, labels: list[str]) -> Comparison:
    """out, ref: [num_queries, num_heads, head_dim]; labels name each query row.

    An element mismatches when |out - ref| > atol + rtol * |ref| or either is
    NaN, with the key-census head held to CENSUS_TOLERANCES; the worst element
    is the one with the largest |out - ref| / bound.
    """
    tol, census_tol = TOLERANCES[dtype], CENSUS_TOLERANCES[dtype]
    census = census_heads(out.shape[1])
    atol = torch.full((1, out.shape[1], 1), tol["atol"], dtype=torch.float64)
    rtol = torch.full((1, out.shape[1], 1), tol["rtol"], dtype=torch.float64)
    atol[:, census], rtol[:, census] = census_tol["atol"], census_tol["rtol"]

    out64 = out.detach().to("cpu", torch.float64)
    diff = (out64 - ref).abs()
    nan = torch.isnan(diff)
    excess = torch.where(nan, torch.full_like(diff, float("inf")), diff / (atol + rtol * ref.abs()))
    row, head, _ = torch.unravel_index(torch.argmax(excess), diff.shape)
    finite = torch.isfinite(diff)
    rel = diff / ref.abs().clamp_min(1e-6)
    mismatched = (excess > 1).double()
    return Comparison(
        max_abs_err=float(diff[finite].max()) if finite.any() else float("nan"),
        max_rel_err=float(rel[finite].max()) if finite.any() else float("nan"),
        mismatch_frac=float(mismatched.mean()),
        nan_count=int(nan.sum()),
        worst=f"{labels[int(row)]} head {int(head)}{' (key census)' if int(head) in census else ''}",
        atol=tol["atol"], rtol=tol["rtol"],
        census_mismatch_frac=float(mismatched[:, census].mean()) if census else 0.0,
        census_atol=census_tol["atol"], census_rtol=census_tol["rtol"],
    )
