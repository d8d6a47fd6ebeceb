"""Compare a backend's output with the reference and say plainly what differs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.tolerances import TOLERANCES


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float
    max_rel_err: float
    mismatch_frac: float
    nan_count: int
    worst: str  # where the worst element is, in the reader's terms
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
    """out, ref: [num_queries, num_heads, head_dim]; labels name each query row."""
    tol = TOLERANCES[dtype]
    out64 = out.detach().to("cpu", torch.float64)
    diff = (out64 - ref).abs()
    nan = torch.isnan(out64)
    diff = torch.where(nan, torch.full_like(diff, float("inf")), diff)
    bound = tol["atol"] + tol["rtol"] * ref.abs()
    mismatched = diff > bound
    rel = diff / ref.abs().clamp_min(1e-6)
    flat = int(torch.argmax(torch.where(torch.isinf(diff), torch.full_like(diff, 1e300), diff)))
    row, head, _ = torch.unravel_index(torch.tensor(flat), diff.shape)
    finite = diff[~torch.isinf(diff)]
    return Comparison(
        max_abs_err=float(finite.max()) if finite.numel() else float("nan"),
        max_rel_err=float(rel[~torch.isinf(rel)].max()) if finite.numel() else float("nan"),
        mismatch_frac=float(mismatched.float().mean()),
        nan_count=int(nan.sum()),
        worst=f"{labels[int(row)]} head {int(head)}",
        atol=tol["atol"], rtol=tol["rtol"],
    )
