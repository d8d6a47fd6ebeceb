"""Forward modes (what a batch is) and runner forms (how it is executed)."""

from runner_modes.draft_decode import MODE as DRAFT_DECODE
from runner_modes.draft_extend_v2 import MODE as DRAFT_EXTEND_V2
from runner_modes.target_verify import MODE as TARGET_VERIFY

MODES = {mode.name: mode for mode in (TARGET_VERIFY, DRAFT_EXTEND_V2, DRAFT_DECODE)}
