"""The generated tier: N cases drawn from a seed, named and ready for the cell matrix.

Hypothesis drives the draws (harness/search/case_strategy.py) in short passes, each
seeded from the run's seed and the pass number, keeping the first N distinct
draws. Short passes because hypothesis, a testing engine, spends the first
tenth of a long run (up to 50 examples) on deliberately minimal examples;
with fewer than 10 examples a pass it starts random generation right after
the simplest one. The same seed gives the same cases, a larger N extends a
smaller one's list, and the shrinker replays one pass to find a draw again.
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing
import os
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.internal.constants_ast import Constants

from harness.base import platform
from harness.search.case_strategy import DrawnCase, drawn_cases
from harness.case.case_traits import remember_traits, traits_of
from harness.base.case_spec import Case, CaseSpec
from harness.case.cases import spec_from_fields
from harness.search.draw_caps import DEFAULT_DECODE_MAX_BS, DrawProfile
from harness.ledger.known_failures import GENERATED_CASES
from harness.fixtures.sglang_env import decode_capture_sizes

# Valid examples per pass: below 10, hypothesis skips its minimal-examples warm-up.
DRAWS_PER_PASS = 9
PASS_SEED_BITS = 20  # pass p of seed s runs hypothesis with seed (s << 20) | p

PASS_SETTINGS = dict(max_examples=DRAWS_PER_PASS, database=None, deadline=None, derandomize=False,
                     suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                     verbosity=Verbosity.quiet)


@contextlib.contextmanager
def draws_from_the_seed_alone() -> Iterator[None]:
    """Switch off hypothesis's mixing of the caller's own literals into draws.

    Hypothesis (HypothesisProvider._local_constants) draws now and then a
    literal found in any non-test module the process has loaded. Which
    modules are loaded differs between pytest's controller, its workers and
    the shrinker, so the same seed would give different cases; and the
    harness's own numbers, seed-bug replays included, would leak into draws.
    """
    from hypothesis.internal.conjecture import providers

    hook = providers.HypothesisProvider.__dict__.get("_local_constants")
    if hook is None:
        raise RuntimeError("hypothesis no longer has HypothesisProvider._local_constants; "
                           "update harness/search/generated.py for the pinned hypothesis version")
    providers.HypothesisProvider._local_constants = property(lambda self: Constants())
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers.HypothesisProvider._local_constants = hook
        providers.CONSTANTS_CACHE.cache.clear()


def run_pass(profile: DrawProfile, seed: int, number: int, visit: Callable[[DrawnCase], None],
             shrink: bool = False) -> None:
    """Feed ``visit`` one pass's draws in order; with ``shrink``, hypothesis shrinks what it raises."""
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]

    # Hypothesis's default profile as the base: a profile the environment loads (CI's) changes nothing.
    @settings(settings.get_profile("default"), **PASS_SETTINGS, phases=phases)
    @hypothesis_seed((seed << PASS_SEED_BITS) | number)
    @given(drawn_cases(profile))
    def one_pass(drawn: DrawnCase) -> None:
        visit(drawn)

    with draws_from_the_seed_alone():
        one_pass()


@dataclass(frozen=True)
class Draw:
    drawn: DrawnCase
    pass_number: int  # the pass that drew it first, for the shrinker
    traits: tuple[str, ...]  # harness/case/case_traits.py, found where it was drawn


def _known_to_fail(drawn: DrawnCase, name: str, known: Sequence):
    """The KNOWN_FAILURES.md entry that covers a cell of the draw (its scope, on the installed release), or None."""
    from harness.cell.cell_matrix import expand_cells
    from harness.ledger.known_failures import match

    return next(filter(None, (match(known, cell.record_keys()) for cell in expand_cells([as_case(drawn, name, "")]))),
                None)


def _one_pass(profile: DrawProfile, seed: int, number: int) -> list[tuple[DrawnCase, tuple[str, ...]]]:
    """A pass's draws, each with its case traits: finding them walks every query of the case (about
    17 ms at production shapes), work that belongs with the draw, on the draw processes' cores,
    rather than in the controller and again in every worker that builds the cells."""
    found: list[DrawnCase] = []
    run_pass(profile, seed, number, found.append)
    return [(drawn, traits_of(as_case(drawn, _UNNAMED, ""))) for drawn in found]


_UNNAMED = f"{GENERATED_CASES}unnamed"  # traits do not depend on the name


def seed_passes(profile: DrawProfile, seed: int, processes: int = 1
                ) -> Iterator[tuple[int, list[tuple[DrawnCase, tuple[str, ...]]]]]:
    """The seed's passes in order, each as (pass number, its draws and their traits), for as long as
    the caller reads.

    Each pass draws from its own seed alone, so a pass gives the same draws wherever it runs:
    with ``processes`` > 1 the passes are drawn that many at a time in forked copies of this
    process, ahead of the reader, which is what makes a GPU host's hundreds of draws take seconds,
    not the half minute one core spends redrawing rejected sizes. Forked, not spawned: a copy
    starts with sglang's capture sizes and every strategy built. Once the reader stops, the
    copies still drawing are terminated, not waited for.
    """
    numbers = range(1 << PASS_SEED_BITS)
    if processes <= 1:
        yield from ((number, _one_pass(profile, seed, number)) for number in numbers)
        return
    platform.sm_count()  # read here, where CUDA may start: a forked copy cannot start it (the draws' memory caps)
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        yield from zip(numbers, pool.imap(functools.partial(_one_pass, profile, seed), numbers))


def draw_processes() -> int:
    """Processes for a run's draws: every core (the workers have not started yet)."""
    return os.cpu_count() or 1


def distinct_draws(profile: DrawProfile, seed: int, count: int, known: Sequence | None = None,
                   passed_over: Counter | None = None, processes: int = 1) -> list[Draw]:
    """The seed's first ``count`` distinct draws (hypothesis may draw a case twice).

    A draw a ``known`` failure (KNOWN_FAILURES.md entries; None: the repository's ledger, as a run
    without --known-failures reads it) covers is passed over: the tier hunts new failures, and the
    ledger's own cells hold a known one to account (their unexpected pass, once the bug is fixed,
    removes the entry, and the tier draws there again). Entries select generated cells by name, e.g.
    `draft_decode-gen*w[0-9]*` for every drawn draft decode with a model window, or by a case trait.
    ``passed_over`` counts those draws by entry id, so the run can say so (such an entry is not stale). An
    entry whose failure shows only after a cell's numbers pass (host-sync) passes no draw over.
    ``processes``: how many passes are drawn at once (seed_passes); the draws are the same for any.
    """
    if known is None:
        from harness.ledger.known_failures import KNOWN_FAILURES_FILE, load_known_failures

        known = load_known_failures(KNOWN_FAILURES_FILE)
    known = [entry for entry in known if entry.masks_numbers]  # a host-sync entry's cells still judge numbers
    kept: dict[tuple, Draw] = {}
    covered: set[tuple] = set()  # draws a known failure covers, each counted once
    # sglang's capture sizes are asked before drawing: importing sglang seeds `random`, which
    # hypothesis refuses inside a strategy.
    decode_capture_sizes(DEFAULT_DECODE_MAX_BS)
    if count <= 0:
        return []
    passes = seed_passes(profile, seed, processes)
    for number, drawn_in_pass in passes:
        for drawn, traits in drawn_in_pass:
            name = generated_name(seed, len(kept), spec_from_fields(drawn.fields))
            if drawn.key in kept or drawn.key in covered:
                continue
            remember_traits(as_case(drawn, name, ""), traits)
            entry = known and _known_to_fail(drawn, name, known)
            if not entry:
                kept[drawn.key] = Draw(drawn, number, traits)
                if len(kept) >= count:
                    passes.close()
                    return list(kept.values())
            else:
                covered.add(drawn.key)
                if passed_over is not None:
                    passed_over[entry.id] += 1
    return list(kept.values())


def generated_name(seed: int, index: int, spec: CaseSpec) -> str:
    """gen<seed>-<i>-<shape>: the seed and draw index find the draw again; the shape is for humans.

    b bs, k topk, s steps, p page, d head_dim, h query x KV heads (or, for another family's model, its
    name and h one GPU's heads), w the model's sliding window (where there is one); short enough for a
    case name.
    """
    mirrors = "" if spec.host_mirrors == "full" else f"-{spec.host_mirrors.replace('_', '')}"
    window = f"w{spec.sliding_window}" if spec.sliding_window else ""
    heads = (f"d{spec.head_dim}h{spec.num_heads}x{spec.num_kv_heads}" if not spec.model
             else f"-{spec.model}-h{spec.num_heads}")  # another family's model: its name and one GPU's heads
    shape = f"b{spec.bs}k{spec.topk}s{spec.num_steps}p{spec.page_size}{heads}{window}{mirrors}"
    return f"{GENERATED_CASES}{seed}-{index}-{shape}"


def as_case(drawn: DrawnCase, name: str, source: str) -> Case:
    return Case(mode=drawn.mode, spec=spec_from_fields({**drawn.fields, "name": name}), source=source)


@dataclass(frozen=True)
class Generated:
    case: Case
    draw: Draw
    index: int  # position in the seed's list of distinct draws


def generated_tier(profile: DrawProfile, seed: int, count: int, known: Sequence | None = None) -> list[Generated]:
    return tier_of(profile, seed, distinct_draws(profile, seed, count, known))


def tier_of(profile: DrawProfile, seed: int, draws: Sequence[Draw]) -> list[Generated]:
    """The named cases of a seed's distinct draws, in draw order."""
    tier = []
    for index, draw in enumerate(draws):
        spec = spec_from_fields(draw.drawn.fields)
        case = as_case(draw.drawn, generated_name(seed, index, spec),
                       f"generated ({profile.name} profile, seed {seed}, draw {index})")
        remember_traits(case, draw.traits)
        tier.append(Generated(case, draw, index))
    return tier


def draws_as_json(draws: Sequence[Draw]) -> str:
    """The draws as text, so that one process draws and the others (pytest-xdist's workers) read:
    a draw at production shapes costs about 0.1 s of hypothesis, every worker drawing the same
    hundreds of cases again cost a GPU run a minute of its start."""
    return json.dumps([[d.drawn.mode, d.drawn.fields, d.pass_number, d.traits] for d in draws])


def draws_from_json(text: str) -> list[Draw]:
    return [Draw(DrawnCase(mode, fields), number, tuple(traits)) for mode, fields, number, traits in json.loads(text)]
