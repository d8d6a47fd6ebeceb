"""The warm-up pass's plan: one cell per kernel configuration, nothing the kept cache already holds,
workers that wait only while a pass runs, and the cells that compile alone first and without
waiting (harness/speed/warmup.py, harness/session/pytest_plugin.py)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import SimpleNamespace

from harness.session import pytest_plugin
from harness.speed import warmup
from harness.case.cases import load_all_cases
from harness.cell.cell_matrix import expand_cells


def test_one_representative_per_shared_kernel_configuration_and_the_ledger_skips_compiled_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    cells = expand_cells(load_all_cases())
    chosen, single = warmup.representatives(cells)
    configurations = {warmup.kernel_configuration(cell) for cell in chosen}
    assert len(configurations) == len(chosen)  # one cell per configuration
    runnable = Counter(warmup.kernel_configuration(cell) for cell in cells if warmup.skip_reason(cell) is None)
    assert configurations == {c for c, n in runnable.items() if n > 1}  # every shared one covered
    assert single == sum(n == 1 for n in runnable.values()) > 0  # the hand matrix has lone ones too
    plan = warmup.plan_warm_up(cells, processes=64, run_folder=tmp_path)
    assert plan.to_compile == chosen and plan.processes == min(64, len(chosen)) and plan.single == single
    done = chosen[: len(chosen) // 2]
    ledger = warmup._ledger()
    ledger.parent.mkdir(parents=True)
    ledger.write_text(__import__("json").dumps([warmup._ledger_key(warmup.kernel_configuration(c)) for c in done]))
    assert warmup.plan_warm_up(cells, 4, tmp_path).to_compile == chosen[len(done):]


def test_a_configuration_one_cell_alone_meets_is_left_to_that_cell():
    """Warming it would run the cell twice: the cell compiles it, as the only one that needs it."""
    cells = expand_cells(load_all_cases())
    lone = next(cell for cell in cells if warmup.skip_reason(cell) is None)
    others = [cell for cell in cells if warmup.kernel_configuration(cell) != warmup.kernel_configuration(lone)]
    assert warmup.kernel_configuration(lone) not in {warmup.kernel_configuration(c) for c in
                                                      warmup.representatives([lone, *others])[0]}
    assert warmup.kernel_configuration(lone) in {warmup.kernel_configuration(c) for c in
                                                  warmup.representatives([lone, lone, *others])[0]}


def test_a_worker_waits_only_while_a_pass_runs(tmp_path):
    started = time.monotonic()
    warmup.wait_for_warm_up(tmp_path)  # no pass: returns at once
    assert time.monotonic() - started < 0.1
    (tmp_path / warmup.STARTED_FILE).write_text("1\n")
    threading.Timer(0.5, lambda: (tmp_path / warmup.DONE_FILE).write_text("0.5\n")).start()
    warmup.wait_for_warm_up(tmp_path)
    assert time.monotonic() - started >= 0.5


def _item(cell, config=None):
    """What the plugin's hooks read of a pytest item."""
    return SimpleNamespace(callspec=SimpleNamespace(params={"cell": cell}), config=config)


def test_cells_compiling_alone_run_first_in_every_worker_and_the_rest_keep_the_matrix_order():
    cells = expand_cells(load_all_cases())
    alone = warmup.compiling_alone(cells)
    runnable = Counter(warmup.kernel_configuration(cell) for cell in cells if warmup.skip_reason(cell) is None)
    assert alone == {cell.cell_id for cell in cells if warmup.skip_reason(cell) is None
                     and runnable[warmup.kernel_configuration(cell)] == 1}
    assert len(alone) == warmup.representatives(cells)[1] > 0
    config = SimpleNamespace(_attn_cells=cells, option=SimpleNamespace(keyword=""))
    items = [_item(cell) for cell in cells] + [SimpleNamespace(name="test_not_a_cell")]
    ordered = list(items)
    pytest_plugin._compiling_alone_first(config, ordered)
    assert config._attn_compiling_alone == alone
    head = [item.callspec.params["cell"].cell_id for item in ordered[:len(alone)]]
    assert set(head) == alone
    assert ordered[len(alone):] == [item for item in items if pytest_plugin._cell_id(item) not in alone]


def test_a_cell_compiling_alone_does_not_wait_for_the_pass_and_a_shared_one_does(tmp_path, monkeypatch):
    cells = expand_cells(load_all_cases())
    alone = warmup.compiling_alone(cells)
    config = SimpleNamespace(_attn_compiling_alone=alone)
    lone = next(cell for cell in cells if cell.cell_id in alone)
    shared = next(cell for cell in cells if warmup.skip_reason(cell) is None and cell.cell_id not in alone)
    monkeypatch.setattr(pytest_plugin, "run_dir", lambda: tmp_path)
    monkeypatch.setattr(pytest_plugin, "_WARM_UP_WAITED", [])
    (tmp_path / warmup.STARTED_FILE).write_text("1\n")  # a pass that is running
    started = time.monotonic()
    pytest_plugin.pytest_runtest_setup(_item(lone, config))
    assert time.monotonic() - started < 0.1 and not pytest_plugin._WARM_UP_WAITED
    threading.Timer(0.5, lambda: (tmp_path / warmup.DONE_FILE).write_text("0.5\n")).start()
    pytest_plugin.pytest_runtest_setup(_item(shared, config))
    assert time.monotonic() - started >= 0.5 and pytest_plugin._WARM_UP_WAITED
