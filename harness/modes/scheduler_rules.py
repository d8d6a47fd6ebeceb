"""What production reaches, from sglang's scheduler rules and a deployment's server arguments alone.

A case stands in a state production reaches, and what bounds it is the scheduler, never the code
under test: how wide sglang sizes a req_to_token row is what the harness checks (a row too narrow for
a reachable state is a failing capacity check), so it cannot also decide which states are reachable.
The rules, read from sglang's scheduler and speculative workers (0.5.17 to 0.5.23):

- **The committed wall.** Scheduler.init_req_max_new_tokens clamps max_new_tokens M to
  max_req_len - len(prompt) - 1, max_req_len = context_len - 1 (TpModelWorker.get_worker_info). A
  request with n outputs holds n - 1 of them in its KV (the last is the root the next step writes), and
  Req.update_finish_state finishes it once n >= M. A decode batch is therefore built on at most
  n = M - 1 outputs, a committed length of max_req_len - 3. Under the overlap scheduler (the default)
  the step in flight commits up to ``most_committed`` tokens before the next runs, on a batch built
  one step earlier: 0.5.17-0.5.21 build it from every unfinished request (committed up to
  max_req_len - 3 + most_committed), 0.5.22+ leave out the requests whose next token finishes them
  (Scheduler._reqs_finishing_inflight: up to max_req_len - 4 + most_committed). The committed length
  a step runs on thus passes context_len once a step commits 6 tokens or more; each mode's forward
  then writes its own window past it.
- **The decode reservation.** Each decode step of speculative decoding v2 reserves KV for the step in
  flight and the next (speculative/eagle_utils.eagle_prepare_for_decode, for EAGLE, NGRAM and frozen-KV
  MTP; DFlash reserves 2 x its block in its own prepare_for_decode, which its modes model): a
  request's row grows to committed + 2 x alloc_len_per_decode, rounded up to whole pages, where the
  committed length is the scheduler's at batch build (batch_committed).

harness/case/test_case_limits.py brute-forces both over prompts, max_new_tokens and accept runs, and
harness/fixtures/test_pool_sizing.py holds the reservation to sglang's own get_alloc_reserve_per_decode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.base.case_spec import CaseSpec, max_request_len
from harness.base.releases import since

if TYPE_CHECKING:
    from harness.modes.base import SpecMode

# How far below max_req_len a request's committed length is when it starts the step in flight as the
# scheduler builds the next batch: 0.5.17-0.5.21 build it from every unfinished request; from 0.5.22
# Scheduler._reqs_finishing_inflight leaves out those whose next token finishes them by length.
IN_FLIGHT_BELOW_MAX_REQ_LEN = since({"0.5.17": 3, "0.5.22": 4})

# How far below max_req_len the committed length a decode batch is built on can be: n <= M - 1 outputs.
BATCH_BUILT_BELOW_MAX_REQ_LEN = 3


def max_committed_prefix(context_len: int, most_committed: int, release: str | None = None) -> int:
    """The longest committed prefix a request has when a speculative step (draft, verify, draft extend)
    runs on it, for a model of ``context_len`` and steps committing at most ``most_committed`` tokens
    (SpecMode.most_committed), under the installed sglang's rules (or ``release``'s): the overlap
    bound of the module docstring, the larger for every step size."""
    below = IN_FLIGHT_BELOW_MAX_REQ_LEN.at(release) if release else IN_FLIGHT_BELOW_MAX_REQ_LEN.value
    return max_request_len(context_len) - below + most_committed


def batch_committed(prefix: int, context_len: int, release: str | None = None) -> int:
    """The longest committed length the scheduler can have built the batch on (its host-side count,
    which the reservation starts from) when a step runs on ``prefix`` committed tokens: the prefix
    itself up to the wall without overlap (max_req_len - 3); past it only the overlap scheduler runs a
    step, on a batch built before the step in flight committed at least one token, from a request at
    most max_req_len - IN_FLIGHT_BELOW_MAX_REQ_LEN long."""
    non_overlap_wall = max_request_len(context_len) - BATCH_BUILT_BELOW_MAX_REQ_LEN
    if prefix <= non_overlap_wall:
        return prefix
    below = IN_FLIGHT_BELOW_MAX_REQ_LEN.at(release) if release else IN_FLIGHT_BELOW_MAX_REQ_LEN.value
    return min(prefix - 1, max_request_len(context_len) - below)


def alloc_len_per_decode(topk: int, num_steps: int, num_draft_tokens: int, page_size: int,
                         writes_draft_kv: bool = True) -> int:
    """The KV one request may take in one decode step: max(topk x num_steps, num_draft_tokens), or for
    a paged tree whose draft writes KV, whole pages for each branch (ceil((page - 1 + steps) / page)
    pages, the prefix tail copied into each) times topk (allocation_sizing.get_alloc_len_per_decode)."""
    if page_size == 1 or topk == 1 or not writes_draft_kv:
        return max(num_steps * topk, num_draft_tokens)
    pages_per_branch = (page_size - 1 + num_steps + page_size - 1) // page_size
    return max(pages_per_branch * page_size * topk, num_draft_tokens)


def decode_reserve(mode: "SpecMode", spec: CaseSpec) -> int:
    """What a decode step reserves past the committed length: twice the allocation of one step (the
    double buffer of the overlap scheduler's lag), from the deployment's speculative arguments."""
    args = mode.speculative_args(spec)
    return 2 * alloc_len_per_decode(args.get("speculative_eagle_topk") or 1, args.get("speculative_num_steps") or 1,
                                    args.get("speculative_num_draft_tokens") or 1, spec.page_size,
                                    writes_draft_kv=args.get("speculative_algorithm") != "NGRAM")


def reserved_row_len(prefix: int, context_len: int, reserve: int, page_size: int, release: str | None = None) -> int:
    """How long a request's row is once the batch its step runs in was reserved: the committed length
    the batch was built on (batch_committed) plus the reserve, in whole pages
    (mem_cache/allocation_sizing.page_aligned_decode_alloc_lens)."""
    built_on = batch_committed(prefix, context_len, release)
    return -(-(built_on + reserve) // page_size) * page_size


def production_row_lens(mode: "SpecMode", spec: CaseSpec) -> list[int]:
    """How long each request's req_to_token row is in production while a step of ``mode`` runs on the
    case: what its forwards write (SpecMode.row_lens) or, where the mode's worker reserves a decode
    step's KV (SpecMode.reserves_decode_kv), that reservation if longer."""
    written = mode.row_lens(spec)
    if not mode.reserves_decode_kv:
        return written
    reserve = decode_reserve(mode, spec)
    return [max(row, reserved_row_len(prefix, spec.model_context_len, reserve, spec.page_size))
            for row, prefix in zip(written, spec.prefix_lens)]
