"""Positive control for sharpness: real cells whose backend attends one wrong key must fail.

One req_to_token entry of the batch is pointed at another request's written
slot (harness/probes/controls.py), so the backend reads one wrong key while the
reference keeps the right one; the request holding it has a 253-token prefix,
so its queries attend 254 to 257 keys. Every comparison with the reference
must flag it in the key-census head. On CPU this runs the Triton (fp32, eager
and cg_meta) and torch_native rows; on a GPU every backend, mode and runner
form in bf16 too, the dtype in which one wrong key of 257 used to pass. Run with -s to
see, per cell, whether the scored heads alone would have caught it.
"""

from __future__ import annotations

import pytest

from harness.families import FAMILIES
from harness.probes.controls import census_run, matrix_cell, misdirect_one_key, with_long_prefix

LONG_PREFIX = 253
CASES = ("target_verify-chain-bs2", "target_verify-tree-bs3", "ngram_verify-tree8-bs3",
         "draft_extend_v2-window4-bs2", "draft_decode-chain-bs2", "draft_decode-topk2-bs3",
         "draft_decode-window-sink", "draft_decode-topk2-page16", "dflash_verify-block4-bs2", "dflash_draft-block4-bs2",
         "frozen_kv_mtp_verify-tree-bs3", "frozen_kv_mtp_draft-topk2-bs3",
         # the MLA family (cases/mla): the same control through its latent pool
         "target_verify-mla-chain-bs2", "target_verify-mla-tree-bs3", "draft_extend_v2-mla-window4-bs2",
         "draft_decode-mla-chain-bs2", "draft_decode-mla-topk2-bs3")


def cell_ids():
    """Each case in fp32 and bf16, every backend, eager and each graph form at capture size = bs."""
    from harness.case.cases import load_all_cases
    from harness.cell.cell_matrix import expand_cells

    for candidate in expand_cells(load_all_cases()):
        case_id = candidate.case.case_id.rsplit("-dtype", 1)[0]
        if case_id in CASES and candidate.capture_bs in (None, candidate.case.spec.bs):
            yield candidate.cell_id


@pytest.mark.parametrize("cell_id", cell_ids())
def test_one_wrong_key_fails_the_cell(cell_id, monkeypatch):
    family = FAMILIES[matrix_cell(cell_id).case.spec.family]
    build_state = family.build_state
    misdirected = []

    def build_with_one_wrong_key(*args, **kwargs):
        state = build_state(*args, **kwargs)
        misdirected.append(misdirect_one_key(state))
        return state

    monkeypatch.setattr(family, "build_state", build_with_one_wrong_key)
    control = with_long_prefix(matrix_cell(cell_id), LONG_PREFIX)
    result, against_reference, missed = census_run(control)
    assert not missed, f"{cell_id} with {misdirected[0]}: not flagged in {missed}: {result.describe()}"
    heads = control.case.spec.num_heads
    scored = any(c.mismatch_frac * heads > c.census_mismatch_frac for c in against_reference.values())
    print(f"\n{control.cell_id}: {misdirected[0]}; scored heads alone {'caught' if scored else 'MISSED'} it; "
          f"worst {max(c.max_abs_err for c in against_reference.values()):.3g}")
