"""Frozen-KV MTP verify: TARGET_VERIFY of an EAGLE-shaped draft tree under its own algorithm.

Production contract (sglang 0.5.23, speculative/frozen_kv_mtp_worker_v2.py: FrozenKVMTPWorkerV2
"reuses EAGLEWorkerV2's verify ... verbatim"; FrozenKVMTPDraftWorker.draft builds the tree with
build_tree_kernel_efficient and returns a frozen_kv_mtp_info.FrozenKVMTPVerifyInput, a subclass
of EagleVerifyInput): the batch is target_verify.py's (seq_lens = committed prefix, the window
written at out_cache_loc, a chain causal, a tree through custom_mask, the host mirrors the
prefix or None on the GPU-only path), with spec_algorithm FROZEN_KV_MTP and the verify input's
spec_input_type FROZEN_KV_MTP_VERIFY, which backends that branch on EAGLE_VERIFY do not match.
"""

from __future__ import annotations

from harness.modes.target_verify import TargetVerify


class FrozenKVMTPVerify(TargetVerify):
    name = "frozen_kv_mtp_verify"
    spec_algorithm = "FROZEN_KV_MTP"

    def verify_input_class(self):
        from sglang.srt.speculative.frozen_kv_mtp_info import FrozenKVMTPVerifyInput

        return FrozenKVMTPVerifyInput


MODE = FrozenKVMTPVerify()
