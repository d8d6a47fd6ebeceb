"""Forward modes: what a batch is and what each query may see. The one registry of modes.

Adding a mode is its module here (a class with the SpecMode hooks of base.py) plus its
cases/<mode>.yaml; the case schema, matrix and reports read the names from MODES.
"""

from harness.modes.base import SpecMode
from harness.modes.dflash_draft import MODE as DFLASH_DRAFT
from harness.modes.dflash_verify import MODE as DFLASH_VERIFY
from harness.modes.draft_decode import MODE as DRAFT_DECODE
from harness.modes.draft_extend_v2 import MODE as DRAFT_EXTEND_V2
from harness.modes.frozen_kv_mtp_draft import MODE as FROZEN_KV_MTP_DRAFT
from harness.modes.frozen_kv_mtp_verify import MODE as FROZEN_KV_MTP_VERIFY
from harness.modes.ngram_verify import MODE as NGRAM_VERIFY
from harness.modes.target_verify import MODE as TARGET_VERIFY

# Verify forwards first, then the drafts' (the order reports show).
MODES: dict[str, SpecMode] = {mode.name: mode for mode in (
    TARGET_VERIFY, NGRAM_VERIFY, DFLASH_VERIFY, FROZEN_KV_MTP_VERIFY,
    DRAFT_EXTEND_V2, DFLASH_DRAFT, FROZEN_KV_MTP_DRAFT, DRAFT_DECODE)}
