"""Metadata invariants: what every backend's index metadata must satisfy.

Numeric comparison only sees real rows; a padded row with a negative length or
an indptr that runs backwards corrupts memory no real row reads (sglang PR
#26651's class of bug). These rules read the backend's own metadata after
every init (eager, graph capture, graph replay), by field name, so they apply
to any backend whose metadata uses sglang's naming.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from harness.base.transfers import to_host_together

Capacity = Callable[[torch.Tensor], "int | None"]


class InvariantViolation(AssertionError):
    """A backend's metadata breaks a rule; the message names the backend, the field and the values."""


def _int_vector(value) -> bool:
    return (isinstance(value, torch.Tensor) and value.dim() == 1 and value.numel() > 0
            and not value.is_floating_point() and value.dtype != torch.bool)


def _fields(metadata) -> dict:
    if dataclasses.is_dataclass(metadata):
        return {f.name: getattr(metadata, f.name) for f in dataclasses.fields(metadata)}
    return dict(getattr(metadata, "__dict__", {}))


def _is_offsets(name: str) -> bool:
    return name.endswith("indptr") or name.startswith("cu_seqlens")


def _is_lengths(name: str) -> bool:
    return not _is_offsets(name) and (name.endswith("seqlens") or name.endswith("_lens")
                                      or name.startswith("cache_seqlens"))


def check_metadata(metadata, where: str, capacity: Capacity | None = None) -> None:
    """Raise InvariantViolation if offsets or lengths in ``metadata`` are inconsistent.

    ``capacity`` gives the recorded size of guarded buffers (Guards.capacity);
    other buffers are sized from their allocation when checked.
    """
    fields = _fields(metadata)
    vectors = {name: value for name, value in fields.items() if _int_vector(value)}
    on_host = dict(zip(vectors, to_host_together(list(vectors.values()))))
    for name, values in on_host.items():
        if _is_offsets(name):
            if int(values[0]) != 0:
                raise InvariantViolation(f"{where}: {name}[0] = {int(values[0])}, an indptr must start at 0")
            steps = values[1:] - values[:-1]
            if bool((steps < 0).any()):
                row = int(torch.nonzero(steps < 0)[0])
                raise InvariantViolation(
                    f"{where}: {name} decreases at row {row} ({int(values[row])} -> {int(values[row + 1])}): "
                    "a negative per-request length")
        elif _is_lengths(name) and bool((values < 0).any()):
            row = int(torch.nonzero(values < 0)[0])
            raise InvariantViolation(f"{where}: {name}[{row}] = {int(values[row])} < 0")
    for name, values in on_host.items():
        indices_name = name.replace("indptr", "indices")
        indices = fields.get(indices_name)
        if name.endswith("indptr") and isinstance(indices, torch.Tensor):
            recorded = capacity(indices) if capacity else None
            held = recorded if recorded is not None else allocation_capacity(indices)
            if int(values[-1]) > held:
                source = "recorded when guarded" if recorded is not None else "its allocation"
                raise InvariantViolation(
                    f"{where}: {name}[-1] = {int(values[-1])} indices to read, but the buffer behind "
                    f"{indices_name} holds {held} ({source})")


def allocation_capacity(view: torch.Tensor) -> int:
    """Elements addressable from the view's start: kernels index the buffer, not the view.

    sglang hands kernels slices of preallocated buffers; what bounds a read is
    the allocation behind the slice. Read from the tensor when checked: for
    buffers the harness did not guard there is no earlier moment.
    """
    return view.untyped_storage().nbytes() // view.element_size() - view.storage_offset()


def step_backends(backend) -> list:
    return list(getattr(backend, "attn_backends", [backend]))


def check_backend(backend, where: str, capacity: Capacity | None = None) -> None:
    for step, inner in enumerate(step_backends(backend)):
        metadata = getattr(inner, "forward_metadata", None)
        if metadata is not None:
            check_metadata(metadata, f"{where}, step backend {step}", capacity)


def check_graph_capacity(backend, capture_bs: int, topk: int, context_len: int, multi_step: bool,
                         table_page: int | None = None) -> None:
    """The graph's kv_indices must hold the largest batch the capture size admits.

    Every captured request may sit at full context; in draft decode each of its
    topk branches reads that context (sglang #27338 sized this without topk).
    ``table_page``: the buffer is a block table of pages this many tokens long, a row per request
    (FlashMLA's), rather than one list of token slots.
    """
    buffers = getattr(backend, "cuda_graph_kv_indices", None)
    if buffers is None:
        return
    if table_page:
        _check_block_table(buffers, capture_bs * topk, context_len, table_page)
        return
    # FlashInfer keeps one buffer per wrapper in a list; Triton a single tensor.
    for buffer in buffers if isinstance(buffers, list) else [buffers]:
        _check_capacity(buffer, capture_bs, topk, context_len, multi_step)


def _check_capacity(buffer, capture_bs: int, topk: int, context_len: int, multi_step: bool) -> None:
    per_row = buffer.shape[-1] if multi_step else buffer.numel()
    needed = capture_bs * (topk if multi_step else 1) * context_len
    if per_row < needed:
        raise InvariantViolation(
            f"init_cuda_graph_state: cuda_graph_kv_indices {'row ' if multi_step else ''}holds {per_row} "
            f"indices, but {capture_bs} captured requests x {topk if multi_step else 1} branches x "
            f"context {context_len} need {needed}")


def _check_block_table(table, rows: int, context_len: int, page: int) -> None:
    pages = -(-context_len // page)
    if table.dim() != 2 or table.shape[0] < rows or table.shape[1] < pages:
        raise InvariantViolation(
            f"init_cuda_graph_state: the cuda_graph_kv_indices block table is {tuple(table.shape)}, but {rows} captured "
            f"rows at context {context_len} need ({rows}, {pages}) pages of {page}")


def check_row_capacity(needed: list[int], prefixes: list[int], context_len: int, width: int) -> None:
    """Raise when sglang's req_to_token rows (``width`` columns, as its model runner sizes the pool)
    cannot hold a row production reaches: ``needed`` per request (harness/modes/scheduler_rules.py
    production_row_lens), each with its committed prefix. The message names every short row and by how much."""
    short = [(request, row, prefix) for request, (row, prefix) in enumerate(zip(needed, prefixes)) if row > width]
    if not short:
        return
    request, row, prefix = max(short, key=lambda item: item[1])
    others = f"; {len(short) - 1} more request(s) short too" if len(short) > 1 else ""
    raise InvariantViolation(
        f"req_to_token capacity: sglang sizes a row {width} columns (model context {context_len} + {width - context_len} "
        f"of headroom, allocation_sizing.get_req_to_token_extra_context_len), but request {request} (committed "
        f"{prefix}) needs {row} while its step runs (its window and the decode reservation, in whole pages: "
        f"harness/modes/scheduler_rules.py): {row - width} column(s) short, which production writes into the next "
        f"request's row{others}")
