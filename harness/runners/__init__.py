"""Runner forms: how a cell's forwards are executed. The one registry of their names.

A form is an entry, as a backend or a mode is: the case schema, the cell matrix,
the report schema and the known-failures parser all read the names and the
``graph`` flag from here. Whether a form can run on this machine, and for which
backends, is decided by the entry with the reason a report shows.

- ``eager``: init_forward_metadata, then the forwards, as the workers run them.
- ``cuda_graph``: sglang's graph-runner protocol with a real captured graph,
  replayed on the cell's batch and an extra batch (harness/cell/cell_matrix.py, replay_batches),
  each padded to the capture size (GPU only).
- ``cg_meta``: the same hooks and static buffers with the forwards run eagerly,
  the CPU stand-in that lets CI catch graph-metadata bugs. Exact only for
  backends whose forwards read nothing but those buffers, so a backend entry
  must vouch for it (``BackendEntry.cg_meta_exact``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.base import platform

if TYPE_CHECKING:
    from harness.fixtures.backends import BackendEntry


@dataclass(frozen=True)
class RunnerForm:
    name: str
    graph: bool  # runs through the graph hooks: the cell carries a capture size and a pad style
    captures: bool  # records and replays a real torch.cuda.CUDAGraph
    gpu: bool | None  # True: needs a GPU; False: CPU stand-in, pointless on a GPU; None: either

    def skip_reason(self, backend: "BackendEntry") -> str | None:
        if self.graph and backend.no_graph_reason:
            return self._no_graph(backend)
        if self.gpu and not platform.HAS_GPU:
            return "CUDA-graph capture needs a GPU"
        return self.unneeded_here() or self._not_exact(backend)

    def refusal(self, backend: "BackendEntry") -> str | None:
        """Why the form never runs the backend, on any machine, or None: skip_reason without the machine."""
        if self.graph and backend.no_graph_reason:
            return self._no_graph(backend)
        return self._not_exact(backend)

    def unneeded_here(self) -> str | None:
        """Why this machine leaves the form out though it could run it: the CPU stand-in on a GPU, where
        the cuda_graph form runs the same hooks with a real graph."""
        if self.gpu is False and platform.HAS_GPU:
            return "cg_meta (graph hooks, eager forwards) is the CPU stand-in; on a GPU the cuda_graph form runs"
        return None

    def _no_graph(self, backend: "BackendEntry") -> str:
        return f"{backend.name} has no CUDA-graph support: {backend.no_graph_reason}"

    def _not_exact(self, backend: "BackendEntry") -> str | None:
        if self.graph and not self.captures and not backend.cg_meta_exact:
            return (f"cg_meta needs a backend whose forwards read only its graph buffers; "
                    f"{backend.name} is not checked for that")
        return None


RUNNER_FORMS: dict[str, RunnerForm] = {form.name: form for form in (
    RunnerForm("eager", graph=False, captures=False, gpu=None),
    RunnerForm("cuda_graph", graph=True, captures=True, gpu=True),
    RunnerForm("cg_meta", graph=True, captures=False, gpu=False),
)}
RUNNER_NAMES = tuple(RUNNER_FORMS)
GRAPH_RUNNER_NAMES = tuple(name for name, form in RUNNER_FORMS.items() if form.graph)
