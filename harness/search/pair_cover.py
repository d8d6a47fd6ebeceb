"""`python -m harness.search.pair_cover`: case variants that cover the pairs of axis values no cell covers.

A greedy weighted pairwise cover (harness/search/pair_coverage.py says what a pair is and which are
possible): variants of one case of the mode, each setting the values of CASE_AXES, run at one
group of dtypes and in every runner form or eagerly only, picked one at a time for the most
(backend, pair)s still to cover per unit of cost, where cost is the cells CPU CI would run. Two
kinds of pair are to cover: possible pairs no cell has, and pairs a cell this machine runs
could have that only cells it skips have (so the CPU run meets every pair it can). A variant
never repeats a cell of the matrix or of another variant. The output is case entries to paste
into cases/<mode>.yaml; harness/search/test_pair_coverage.py then holds the matrix to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from harness.base import cli
from harness.base.case_spec import Case, CaseSpec
from harness.case.cases import CASES_DIR, CaseFields, CaseFileError, fields_of, load_all_cases, spec_from_fields
from harness.cell.cell_matrix import expand_cells, skip_reason
from harness.modes import MODES
from harness.search.pair_coverage import AXIS, Coverage, Prober, cell_key, coverage, pairs_of

CASE_AXES = ("host_mirrors", "page_size", "topk", "draft_window", "kv_layout")  # what a suggested variant sets
FORMS = {"all": {}, "eager": {"runners": ["eager"]}}  # every runner form (graph ones at bs and 2 x bs), or eager
DTYPE_GROUPS = (("float32", "bfloat16"), ("bfloat16",), ("float16",), ("float32",))  # a case entry each in cases/*.yaml
DTYPE_LABELS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # in a case entry's name
# What a suggestion costs, counted in cells this machine runs: each cell it runs here 1, each cell
# it leaves to another machine (a GPU's) a tenth, and the variant itself 4, so that fewer, fuller
# variants win over many that cover a pair or two each (the cells' time dominates on CPU CI).
ELSEWHERE_COST = 0.1
VARIANT_COST = 4


# How a variant's name spells a field it sets (names become test ids: short, no underscores).
NAME_PARTS = {"host_mirrors": lambda v: v.replace("_", ""), "page_size": lambda v: f"p{v}",
              "topk": lambda v: f"k{v}", "draft_window": lambda v: f"w{v}", "draft_sink": lambda v: f"s{v}",
              "kv_layout": lambda v: v.replace("_", "")}


@dataclass(frozen=True)
class Suggestion:
    """A case variant: the fields it sets on its base, the dtypes it runs at, its runner forms."""

    fields: tuple[tuple[str, object], ...]  # in NAME_PARTS order
    dtypes: tuple[str, ...]
    form: str  # a FORMS key
    covers: int = 0  # (backend, pair)s it covers that were uncovered, or not run here where they could be
    cells_here: int = 0  # cells of it this machine runs

    @property
    def name(self) -> str:
        parts = [NAME_PARTS[key](value) for key, value in self.fields]
        return "-".join(parts + (["eager"] if self.form == "eager" else [])) or "as-base"

    def yaml(self) -> str:
        fields = {"name": self.name, **dict(self.fields), **FORMS[self.form]}
        text = ", ".join(f"{key}: {value}".replace("'", "") for key, value in fields.items())
        return f"      - {{{text}}}  # covers {self.covers} more, runs {self.cells_here} here"


class _Choice(NamedTuple):
    suggestion: Suggestion
    covers: set  # (backend, pair, "somewhere" | "here")
    cost: float
    cells: set  # cell_key of every cell it makes


def _choices(cases: list[Case], prober: Prober, mode: str, base: CaseSpec,
             dtype_groups: Iterable[tuple[str, ...]]) -> Iterator[_Choice]:
    """Every variant of ``base`` (captured at bs and 2 x bs) the mode takes, with what it covers and costs."""
    axes = [AXIS[name] for name in CASE_AXES]
    for combination, dtypes, form in itertools.product(itertools.product(*(axis.values for axis in axes)),
                                                       dtype_groups, FORMS):
        fields = {key: value for axis, value in zip(axes, combination) for key, value in axis.sets(value).items()}
        specs = [prober.spec(mode, base, {**fields, **FORMS[form], "dtype": dtype,
                                          "capture_bs": [base.bs, 2 * base.bs]}) for dtype in dtypes]
        made = [] if None in specs else expand_cells([Case(mode, spec, "suggestion") for spec in specs])
        cells = [cell for cell in made if prober.refusal(cell) is None]
        if not cells:
            continue
        runs_here = [cell for cell in cells if skip_reason(cell) is None]
        changed = tuple((key, fields[key]) for key in NAME_PARTS if key in fields and getattr(base, key) != fields[key])
        yield _Choice(Suggestion(changed, dtypes, form, cells_here=len(runs_here)),
                      {(cell.backend, pair, "somewhere") for cell in cells for pair in pairs_of(cell)}
                      | {(cell.backend, pair, "here") for cell in runs_here for pair in pairs_of(cell)},
                      VARIANT_COST + len(runs_here) + ELSEWHERE_COST * (len(cells) - len(runs_here)),
                      {cell_key(cell) for cell in made})


def suggest(cases: list[Case], table: list[Coverage], prober: Prober, mode: str, base: CaseSpec,
            dtype_groups: Iterable[tuple[str, ...]] = DTYPE_GROUPS) -> tuple[list[Suggestion], int]:
    """Greedy weighted pairwise cover of the mode's (backend, pair)s ``table`` leaves to cover, by
    variants of ``base``, each picked for the most still to cover per unit of cost, until none is
    left or no variant covers one more. Returns the picks and how many (backend, pair)s are left."""
    missing = {(entry.backend, pair, where) for entry in table if entry.mode == mode
               for where, pairs in (("somewhere", entry.uncovered), ("here", entry.runnable_here_unrun))
               for pair in pairs}
    taken = {cell_key(cell) for cell in expand_cells(cases)}  # a variant never repeats a cell's work
    choices = list(_choices(cases, prober, mode, base, dtype_groups))
    picked = []
    while missing:
        choices = [choice for choice in choices if not choice.cells & taken]
        best = max(choices, key=lambda choice: len(choice.covers & missing) / choice.cost, default=None)
        gained = best.covers & missing if best else set()
        if not gained:
            break
        picked.append(dataclasses.replace(best.suggestion, covers=len({(b, pair) for b, pair, _ in gained})))
        missing -= gained
        taken |= best.cells
    return picked, len({(backend, pair) for backend, pair, _ in missing})


def case_entries(name: str, base: CaseSpec, picks: list[Suggestion]) -> str:
    """The suggestions as case entries of a cases/*.yaml file, one per dtype group."""
    defaults = CaseFields.model_fields
    shared = [f"    {key}: {value[0] if key == 'input_lens' else value}".replace("'", "")
              for key, value in fields_of(base).items()
              if key not in ("name", "dtype", "capture_bs", "seed") and value != defaults[key].default]
    entries = []
    for dtypes in dict.fromkeys(pick.dtypes for pick in picks):
        label = "-".join([name, *(DTYPE_LABELS[dtype] for dtype in dtypes if dtypes != DTYPE_GROUPS[0])])
        entries += [f"  - name: {label}", *shared,
                    f"    capture_bs: [{base.bs}, {2 * base.bs}]",
                    f"    sweep: {{dtype: [{', '.join(dtypes)}]}}", "    variants:",
                    *(pick.yaml() for pick in picks if pick.dtypes == dtypes)]
    return "\n".join(entries)


def _lengths(text: str) -> list[int]:
    try:
        lengths = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole numbers separated by commas, e.g. 21,37") from None
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every prefix is at least 1 token")
    return lengths


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.search.pair_cover",
                        description="propose case variants covering the pairs no cell covers (greedy), "
                                    "as case entries to paste into cases/<mode>.yaml")
    parser.add_argument("--cases-dir", type=cli.input_folder, default=str(CASES_DIR))
    parser.add_argument("--mode", choices=tuple(MODES), action="append",
                        help="only this mode (repeatable; default every mode with an uncovered pair)")
    parser.add_argument("--base", default=None, metavar="CASE",
                        help="the case (its name without the dtype suffix) a variant starts from "
                             "(default: the mode's first case)")
    parser.add_argument("--prefix-lens", type=_lengths, default=None, metavar="L1,L2,...",
                        help="the variants' committed prefixes (default the base's); an interleaved layout "
                             "with pages needs every request to span two pages or more")
    parser.add_argument("--name", default="pairs", help="the new case entries' name (default pairs)")
    args = parser.parse_args(argv)
    try:
        cases = load_all_cases(Path(args.cases_dir))
    except CaseFileError as error:
        print(f"python -m harness.search.pair_cover: {error}", file=sys.stderr)
        return 2
    prober = Prober()
    table = coverage(cases, prober)
    proposed = False
    for mode in args.mode or list(MODES):
        mine = [case.spec for case in cases if case.mode == mode]
        base = next((spec for spec in mine if spec.name.rsplit("-dtype", 1)[0] == args.base), None) \
            if args.base else (mine[0] if mine else None)
        if base is None:
            print(f"python -m harness.search.pair_cover: {mode}: no case {args.base!r} to start from", file=sys.stderr)
            return 2
        if args.prefix_lens:
            bs = len(args.prefix_lens)
            base = spec_from_fields({**fields_of(base), "bs": bs, "prefix_lens": args.prefix_lens,
                                     "input_lens": base.window and [base.window] * bs})
        picks, left = suggest(cases, table, prober, mode, base)
        if picks or left:
            proposed = True
            print(f"# cases/{mode}.yaml: {len(picks)} variants of {base.name.rsplit('-dtype', 1)[0]}, "
                  f"{sum(pick.cells_here for pick in picks)} cells on this machine"
                  + (f"; {left} (backend, pair)s no variant of it covers (try another --base)" if left else ""))
            print(case_entries(args.name, base, picks))
    if not proposed:
        print("every possible pair of axis values has a cell, and one this machine runs wherever it could")
    return 0


if __name__ == "__main__":
    sys.exit(main())
