"""KV layouts: slots never shared or poisoned, pages aligned, and the untidy layouts really untidy."""

from __future__ import annotations

import itertools

import pytest

from harness.pools import POISON_PAGE, RESERVED_PAGES, build_layout

STYLES = ("shuffled", "contiguous", "interleaved", "non_monotonic")
ROW_LENS = [[9, 1, 40], [33, 17], [5], [64, 64, 3, 20]]


def slot_rows(layout) -> list[list[int]]:
    return [row.tolist() for row in layout.row_slots]


def layouts():
    for style, row_lens, page_size, seed in itertools.product(STYLES, ROW_LENS, (1, 16), (0, 7)):
        yield pytest.param(style, row_lens, page_size, seed,
                           id=f"{style}-{'x'.join(map(str, row_lens))}-page{page_size}-seed{seed}")


@pytest.mark.parametrize("style,row_lens,page_size,seed", layouts())
def test_layout_properties(style, row_lens, page_size, seed):
    layout = build_layout(style, row_lens, page_size, seed, extra_rows=4)
    slots = [slot for row in slot_rows(layout) for slot in row]
    assert [len(row) for row in slot_rows(layout)] == row_lens
    assert len(set(slots)) == len(slots), "a slot is shared"
    assert all(RESERVED_PAGES * page_size <= s < layout.pool_slots for s in slots), "reserved page or out of pool"
    assert layout.poison_slot == POISON_PAGE * page_size
    for row in slot_rows(layout):  # position t lives at offset t % page_size of its page
        assert all(slot % page_size == t % page_size for t, slot in enumerate(row))
        assert all(row[t] // page_size == row[t - t % page_size] // page_size for t in range(len(row)))
    pages = [{slot // page_size for slot in row} for row in slot_rows(layout)]
    assert all(not (a & b) for a, b in itertools.combinations(pages, 2)), "a page is shared"
    rows = layout.req_pool_indices
    assert len(set(rows)) == len(rows) and all(1 <= r < layout.pool_rows for r in rows)


def page_ids(layout) -> list[list[int]]:
    size = layout.page_size
    return [[row[t] // size for t in range(0, len(row), size)] for row in slot_rows(layout)]


def untidy_slots(style: str, layout) -> bool:
    """What each style promises about where KV lives (contiguous promises tidiness)."""
    ids = page_ids(layout)
    flat = [p for row in ids for p in row]
    if style == "contiguous":
        return False
    if style == "shuffled":
        return flat != sorted(flat)
    if style == "interleaved":  # some request's pages are not one run
        return any(row != list(range(row[0], row[0] + len(row))) for row in ids)
    return any(row != sorted(row) for row in ids)  # non_monotonic: a request runs backwards


def matrix_layouts():
    """Every layout the case matrix builds: each case, eager (no extra rows) and each capture size."""
    from harness.cases import load_all_cases
    from harness.modes import MODES

    seen = set()
    for case in load_all_cases():
        spec = case.spec
        row_lens = MODES[case.mode].row_lens(spec)
        for extra in (0, *spec.capture_sizes):
            key = (spec.kv_layout, tuple(row_lens), spec.page_size, spec.seed, extra)
            if key not in seen:
                seen.add(key)
                yield pytest.param(*key, id=f"{case.case_id}-extra{extra}")


def has_room_to_be_untidy(style: str, layout) -> bool:
    """Interleaving and running backwards need a request of two pages or more, shuffling two pages.
    A generated draw kept as a reproducer may name a style its shape leaves no room for (one page a
    request at page 64): its slots are tidy whatever the style, and only its rows can be shuffled."""
    ids = page_ids(layout)
    return sum(map(len, ids)) >= 2 if style == "shuffled" else max(map(len, ids), default=0) >= 2


@pytest.mark.parametrize("style,row_lens,page_size,seed,extra", matrix_layouts())
def test_matrix_layouts_are_untidy_as_named(style, row_lens, page_size, seed, extra):
    layout = build_layout(style, list(row_lens), page_size, seed, extra_rows=extra)
    if style == "contiguous" or has_room_to_be_untidy(style, layout):
        assert untidy_slots(style, layout) == (style != "contiguous")
    shuffled_rows = style in ("shuffled", "non_monotonic")
    assert (layout.req_pool_indices != list(range(1, len(row_lens) + 1))) == shuffled_rows


def test_most_of_the_matrix_has_room_for_its_style():
    """The exemption above is for the few reproducers a draw left without room, not the hand cases."""
    roomless = []
    for param in matrix_layouts():
        style, row_lens, page_size, seed, extra = param.values
        layout = build_layout(style, list(row_lens), page_size, seed, extra_rows=extra)
        if style != "contiguous" and not has_room_to_be_untidy(style, layout):
            roomless.append(param.id)
    assert all("-gen" in name for name in roomless) and len(roomless) <= 12


def test_contiguous_is_tidy():
    layout = build_layout("contiguous", [9, 1, 40], 1, 0)
    slots = [s for row in slot_rows(layout) for s in row]
    assert slots == list(range(slots[0], slots[0] + len(slots)))
    assert layout.req_pool_indices == [1, 2, 3]


def test_interleaved_alternates_requests_page_by_page():
    assert page_ids(build_layout("interleaved", [3, 3], 1, 0)) == [[2, 4, 6], [3, 5, 7]]


def test_non_monotonic_runs_each_request_backwards():
    layout = build_layout("non_monotonic", [4, 33], 16, 0)
    assert page_ids(layout)[1] == sorted(page_ids(layout)[1], reverse=True)
    assert layout.req_pool_indices != [1, 2]  # the seed's draw was [1, 2]: made untidy on purpose
