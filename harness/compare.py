"""Compare a backend's output with the reference and say plainly what differs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.tolerances import TOLERANCES


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float  # over finite elements
    max_rel_err: float
    mismatch_frac: float
    nan_count: int  # elements where the output (or, a harness bug, the reference) is NaN
    worst: str  # the element furthest past (or nearest to) its bound, in the reader's terms
    atol: float
    rtol: float

    @property
    def ok(self) -> bool:
        return self.mismatch_frac == 0.0 and self.nan_count == 0

    def describe(self) -> str:
        return (f"max_abs_err={self.max_abs_err:.3g} max_rel_err={self.max_rel_err:.3g} "
                f"mismatch={self.mismatch_frac:.1%} nan={self.nan_count} "
                f"(atol={self.atol:g}, rtol={self.rtol:g}); worst at {self.worst}")


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: str, labels: list[str]) -> Comparison:
    """out, ref: [num_queries, num_heads, head_dim]; labels name each query row.

    An element mismatches when |out - ref| > atol + rtol * |ref| or either is
    NaN; the worst element is the one with the largest |out - ref| / bound.
    """
    tol = TOLERANCES[dtype]
    out64 = out.detach().to("cpu", torch.float64)
    diff = (out64 - ref).abs()
    nan = torch.isnan(diff)
    bound = tol["atol"] + tol["rtol"] * ref.abs()
    excess = torch.where(nan, torch.full_like(diff, float("inf")), diff / bound)
    row, head, _ = torch.unravel_index(torch.argmax(excess), diff.shape)
    finite = torch.isfinite(diff)
    rel = diff / ref.abs().clamp_min(1e-6)
    return Comparison(
        max_abs_err=float(diff[finite].max()) if finite.any() else float("nan"),
        max_rel_err=float(rel[finite].max()) if finite.any() else float("nan"),
        mismatch_frac=float((excess > 1).double().mean()),
        nan_count=int(nan.sum()),
        worst=f"{labels[int(row)]} head {int(head)}",
        atol=tol["atol"], rtol=tol["rtol"],
    )
