"""A backend's CUDA-graph buffers, found from the backend object itself, and guarded.

sglang backends allocate their static graph state in init_cuda_graph_state and
keep it in attributes: tensors, lists and dicts of tensors (FlashInfer's
per-wrapper lists, FA3's metadata dicts), metadata structs (the verify mask),
and, in multi-step draft backends, step backends holding views of the owner's
buffers. We walk all of it, keep the tensors whose memory did not exist before
init_cuda_graph_state, and swap each such allocation for a guarded copy
(harness/checks/guards.py), re-deriving every view and alias from it: the backend
sees the same values and the same aliasing, and a write past the end of any
allocation lands in a canary zone. A hand list would miss the buffer a new
sglang release adds; each backend entry declares the names it expects
(harness/families/<family>/backends.py) and an undeclared one fails the cell.

The walk descends into lists, tuples, dicts, dataclasses, msgspec structs and
objects whose class lives in the backend's own module (step backends, index
updaters); never into the pools or the model runner, which the harness owns.
Zero-byte tensors have no memory to guard and are skipped.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import msgspec
import torch

from harness.checks.guards import Guards

Visit = Callable[[str, torch.Tensor], torch.Tensor]


class UndeclaredGraphBuffer(AssertionError):
    """init_cuda_graph_state allocated a buffer the backend entry does not declare."""


def _struct_fields(value) -> dict | None:
    if isinstance(value, msgspec.Struct):
        return {name: getattr(value, name) for name in value.__struct_fields__}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return None


def _rebuilt_struct(value, changes: dict):
    if isinstance(value, msgspec.Struct):
        return msgspec.structs.replace(value, **changes)
    if type(value).__dataclass_params__.frozen:
        return dataclasses.replace(value, **changes)
    for name, new in changes.items():
        setattr(value, name, new)
    return value


def _key(key) -> str:
    return f"[{key!r}]" if isinstance(key, str) else f"[{key}]"


class _Walk:
    """One pass over everything reachable from a backend, replacing tensors via ``visit``."""

    def __init__(self, root, visit: Visit):
        self.module = type(root).__module__
        self.visit = visit
        self.done: dict[int, object] = {}  # id of a visited container/object -> its replacement

    def __call__(self, value, path: str):
        if isinstance(value, torch.Tensor):
            return self.visit(path, value)
        if id(value) in self.done:
            return self.done[id(value)]
        if isinstance(value, list):
            self.done[id(value)] = value
            for index, item in enumerate(value):
                value[index] = self(item, f"{path}[{index}]")
            return value
        if isinstance(value, dict):
            self.done[id(value)] = value
            for key, item in list(value.items()):
                value[key] = self(item, f"{path}{_key(key)}")
            return value
        if isinstance(value, tuple):
            items = [self(item, f"{path}[{index}]") for index, item in enumerate(value)]
            changed = any(new is not old for new, old in zip(items, value))
            new = (type(value)(*items) if hasattr(value, "_fields") else tuple(items)) if changed else value
            self.done[id(value)] = new
            return new
        fields = _struct_fields(value)
        if fields is not None:
            new_fields = {name: self(item, f"{path}.{name}") for name, item in fields.items()}
            changes = {name: new for name, new in new_fields.items() if new is not fields[name]}
            new = _rebuilt_struct(value, changes) if changes else value
            self.done[id(value)] = new
            return new
        if type(value).__module__ == self.module and hasattr(value, "__dict__"):
            self.done[id(value)] = value
            for name, item in list(vars(value).items()):
                new = self(item, f"{path}.{name}" if path else name)
                if new is not item:
                    setattr(value, name, new)
            return value
        return value


def walk(backend, visit: Visit) -> None:
    _Walk(backend, visit)(backend, "")


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def reachable_memory(backend) -> list[torch.Tensor]:
    """Tensors reachable now; call before init_cuda_graph_state (holding them keeps
    their addresses from being reused by what init allocates)."""
    found: list[torch.Tensor] = []
    walk(backend, lambda path, tensor: found.append(tensor) or tensor)
    return found


def graph_buffers(backend, before: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Path -> tensor for every non-empty tensor whose memory init_cuda_graph_state allocated."""
    old = {_storage_key(t) for t in before}
    found: dict[str, torch.Tensor] = {}

    def keep(path: str, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.untyped_storage().nbytes() and _storage_key(tensor) not in old:
            found[path] = tensor
        return tensor

    walk(backend, keep)
    return found


def buffer_name(path: str) -> str:
    """A path as declared: step backends and list positions folded.

    ``attn_backends[1].cuda_graph_kv_indices[0]`` -> ``cuda_graph_kv_indices[*]``.
    """
    return re.sub(r"\[\d+\]", "[*]", re.sub(r"^attn_backends\[\d+\]\.", "", path))


def _primary(paths: list[str]) -> str:
    """The name a canary message uses for an allocation: its shortest path."""
    return min(paths, key=lambda p: (p.count(".") + p.count("["), len(p)))


def guard_graph_buffers(guards: Guards, backend, before: list[torch.Tensor]) -> dict[str, list[str]]:
    """Swap every graph buffer's allocation for a guarded copy; return name -> paths.

    One guarded allocation per original allocation: the same tensor reached
    twice maps to one new tensor, and every view is re-derived (same size,
    stride and offset) from the guarded copy of its base.
    """
    found = graph_buffers(backend, before)
    groups: dict[int, list[str]] = {}
    for path, tensor in found.items():
        groups.setdefault(_storage_key(tensor), []).append(path)
    replacement: dict[int, torch.Tensor] = {}  # id(original tensor) -> guarded view: one per tensor
    named: dict[str, list[str]] = {}
    for paths in groups.values():
        name = _primary(paths)
        named[name] = sorted(paths)
        base = found[name]
        nbytes = base.untyped_storage().nbytes()
        raw = guards.allocate(name, nbytes // base.element_size(), base.dtype, base.device).view(torch.uint8)
        raw.copy_(torch.empty(0, dtype=torch.uint8, device=base.device).set_(base.untyped_storage()))
        for tensor in (found[path] for path in paths):
            replacement[id(tensor)] = raw.view(tensor.dtype).as_strided(
                tensor.size(), tensor.stride(), tensor.storage_offset())
    walk(backend, lambda path, tensor: replacement.get(id(tensor), tensor))
    return named


def check_declared(named: dict[str, list[str]], declared: frozenset[str], backend_name: str) -> None:
    undeclared = sorted({buffer_name(p) for paths in named.values() for p in paths} - declared)
    if undeclared:
        raise UndeclaredGraphBuffer(
            f"{backend_name}: init_cuda_graph_state allocated {', '.join(undeclared)}, which the "
            f"'{backend_name}' entry (harness/families/<family>/backends.py) does not declare in graph_buffers "
            "(guarded anyway; declare it so the list of guarded buffers stays true)")
