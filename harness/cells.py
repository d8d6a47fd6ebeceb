"""The cell matrix: every (case, backend, runner form) a run covers, with readable ids."""

from __future__ import annotations

from dataclasses import dataclass

from harness.cases import Case


@dataclass(frozen=True)
class Cell:
    case: Case
    backend: str
    runner: str

    @property
    def cell_id(self) -> str:
        return f"{self.case.case_id}-{self.backend}-{self.runner}"

    @property
    def variant(self) -> str:
        spec = self.case.spec
        shape = "tree" if spec.topk > 1 else "chain"
        return shape if spec.host_mirrors == "full" else f"{shape}+{spec.host_mirrors}"

    def record_keys(self) -> dict:
        """The fields reports group by (see harness/reporting)."""
        return dict(cell_id=self.cell_id, case=self.case.spec.name, backend=self.backend,
                    mode=self.case.mode, variant=self.variant, runner=self.runner,
                    padding=None, capture_bs=None)


def expand_cells(cases: list[Case]) -> list[Cell]:
    return [Cell(case, backend, runner)
            for case in cases for backend in case.spec.backends for runner in case.spec.runners]


def in_shard(index: int, shard: tuple[int, int]) -> bool:
    """Round-robin split: --shard i/n keeps cells i-1, i-1+n, ... (1-based i)."""
    number, total = shard
    return index % total == number - 1
