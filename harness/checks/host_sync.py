"""The sync-free promise, checked: a backend that sglang's scheduler runs without host lengths
(``needs_cpu_seq_lens = False``, PR #26128) exists so the scheduler can skip a device-to-host copy;
if its metadata init, capture or replay then waits on the GPU anyway, the saving is gone and the
overlap scheduler stalls. Nothing numeric shows it, so the cell runs those hooks under torch's sync
debug mode set to "error", which raises at any synchronising CUDA call (``.item()``, ``.cpu()``,
``.tolist()``, a blocking copy, ``nonzero``), and the cell fails naming the call site.

Only a CUDA device can sync with its host, so the guard is armed on a GPU alone; where sglang's
scheduler keeps the host lengths for the backend (it declares needing them, or NGRAM keeps them
for all), nothing was promised and the guard stays off.
"""

from __future__ import annotations

import contextlib
import linecache
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch

_TORCH_SAYS = "called a synchronizing CUDA operation"  # torch's message in sync debug mode "error"
_TORCH = Path(torch.__file__).parent


class HostSyncViolation(AssertionError):
    """A hook the backend promised sync-free waited on the GPU; the message names the call site."""


def call_site(error: BaseException) -> str:
    """The innermost frame outside torch that made the synchronising call: "file:line in function:
    code" (an sglang file relative to its package, a patched copy by the name it was compiled with)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not Path(frame.filename).is_relative_to(_TORCH)]
    if not frames:
        return "an unknown call site (every frame is torch's)"
    frame = frames[-1]
    name = frame.filename
    if "/sglang/" in name:
        name = "sglang/" + name.rsplit("/sglang/", 1)[1]
    code = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    return f"{name}:{frame.lineno} in {frame.name}: {code}"


@contextlib.contextmanager
def sync_free(armed: bool, where: str) -> Iterator[None]:
    """Run the block with every host synchronisation an error, when ``armed``."""
    if not armed:
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    except RuntimeError as error:
        if _TORCH_SAYS not in str(error):
            raise
        raise HostSyncViolation(f"{where}: host sync in a backend sglang runs without host lengths "
                                f"(needs_cpu_seq_lens = False): {call_site(error)}") from error
    finally:
        torch.cuda.set_sync_debug_mode(previous)
