"""The sync-free promise, checked: a backend that sglang's scheduler runs without host lengths
(``needs_cpu_seq_lens = False``, PR #26128) exists so the scheduler can skip a device-to-host copy
each step; if its per-step metadata init then waits on the GPU anyway, the saving is gone and the
overlap scheduler stalls. Nothing numeric shows it, so the cell runs those hooks under torch's sync
debug mode, which reports every synchronising CUDA call (``.item()``, ``.cpu()``, ``.tolist()``,
``int()`` of a device tensor, a blocking copy, an allocation sized by a device value), and the cell
fails naming each call site once its numbers have been judged.

Held to it: the eager ``init_forward_metadata`` and every replay's
``init_forward_metadata_out_graph``, the hooks that run each step. Not held: the capture-time init
(once at start-up, inside the graph runner's capture, where sglang's FA3 reads ``seq_lens.cpu()``
under ``in_capture``), a ``torch.compile``d helper compiling on its first call (dynamo's frames
are on the stack; the compiled code it leaves runs without them), and the harness's
``host_mirrors: none`` variant, a state production does not reach (sglang's own fallbacks for it
are labelled "defensive"). Torch is told to warn, not raise, so the backend's hook runs to its end
and the cell's other checks still run; each warning is traced to its caller here.

Only a CUDA device can sync with its host, so the guard is armed on a GPU alone, and only where
sglang's scheduler runs the backend without host lengths (``promises_sync_free``).
"""

from __future__ import annotations

import contextlib
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

_TORCH_SAYS = "called a synchronizing CUDA operation"  # torch's message in sync debug mode
_TORCH = Path(torch.__file__).parent
_COMPILING = str(_TORCH / "_dynamo")  # frames of a torch.compile in progress
_OURS = (__file__, warnings.__file__)  # the recorder and the warnings module that calls it


class HostSyncViolation(AssertionError):
    """A hook the backend promised sync-free waited on the GPU; the message names each call site."""


def call_site(frames: list[traceback.FrameSummary]) -> str:
    """The innermost frame outside torch and this module, as "file:line in function: code" (an sglang
    file relative to its package, a patched copy by the name it was compiled with)."""
    outside = [frame for frame in frames
               if not Path(frame.filename).is_relative_to(_TORCH) and frame.filename not in _OURS]
    if not outside:
        return "an unknown call site (every frame is torch's)"
    frame = outside[-1]
    name = frame.filename
    if "/sglang/" in name:
        name = "sglang/" + name.rsplit("/sglang/", 1)[1]
    code = (frame.line or "").strip()
    return f"{name}:{frame.lineno} in {frame.name}" + (f": {code}" if code else "")


class SyncLog:
    """The host syncs one cell's guarded hooks made: (hook, call site), in order, each once."""

    def __init__(self, armed: bool) -> None:
        self.armed = armed
        self.sites: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def guard(self, hook: str) -> Iterator[None]:
        """Run ``hook`` with every synchronising CUDA call recorded against it, when armed."""
        if not self.armed:
            yield
            return
        previous_mode, previous_show = torch.cuda.get_sync_debug_mode(), warnings.showwarning

        def record(message, category, filename, lineno, file=None, line=None):
            if _TORCH_SAYS not in str(message):
                return previous_show(message, category, filename, lineno, file, line)
            frames = traceback.extract_stack()
            if any(frame.filename.startswith(_COMPILING) for frame in frames):
                return None  # a torch.compile compiling: once per process, not per step
            entry = (hook, call_site(frames))
            if entry not in self.sites:
                self.sites.append(entry)
            return None

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode(previous_mode)
                warnings.showwarning = previous_show

    def check(self) -> None:
        """Raise HostSyncViolation naming every recorded site, if any."""
        if self.sites:
            listed = "; ".join(f"{hook}: {site}" for hook, site in self.sites)
            raise HostSyncViolation(f"host sync in a backend sglang runs without host lengths "
                                    f"(needs_cpu_seq_lens = False), {len(self.sites)} site(s): {listed}")


UNGUARDED = SyncLog(armed=False)
