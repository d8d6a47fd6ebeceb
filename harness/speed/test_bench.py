"""The benchmark's split of a run's wall time (harness/speed/bench.py phase_split)."""

from __future__ import annotations

from harness.speed.bench import phase_split


def _worker(started, configured, collected, first_cell, last_cell):
    return dict(worker=True, started=started, configured=configured, collected=collected,
                first_cell=first_cell, last_cell=last_cell)


def test_the_parts_add_up_and_a_replacement_worker_does_not_count_as_start_up():
    """Two workers start at launch; one dies on a crashing cell and xdist starts a third at 40 s. The
    third's late start-up is not the run's: start-up ends at 6 s, collection at 20 s, and cells run
    until the last one ends, the replacement's included."""
    launched = 1000.0
    marks = [_worker(1000.0, 1006.0, 1020.0, 1021.0, 1075.0),
             _worker(1000.2, 1005.0, 1019.0, 1021.5, 1070.0),
             _worker(1040.0, 1047.0, 1060.0, 1061.0, 1080.0)]  # the replacement
    split = phase_split(marks, launched, wall=90.0, warm_up={})
    assert split["start + imports"] == 6.0 and split["collection"] == 14.0
    assert split["waiting for warm-up"] == 0.0 and split["cells"] == 60.0 and split["wind-down"] == 10.0
    assert sum(split[name] for name in ("start + imports", "collection", "waiting for warm-up", "cells",
                                        "wind-down")) == 90.0
    assert split["per process start + imports"] == 5.4  # median of 6.0 and 4.8, the replacement left out
