"""Beyond the case files: which pairs of axis values the cells cover and the greedy cover for the
rest (pair_coverage, pair_cover), the generated tier (draw_caps, case_strategy, generated and its
pytest wiring generated_plugin) and shrinking a failing draw in a worker of its own (shrink, cell_worker).

May import: base, checks, modes, fixtures, runners, case, bugs, ledger, cell.
Imported by: reporting (COVERAGE.md), speed (the warm-up plans drawn cells too).
"""
