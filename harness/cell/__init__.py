"""One cell: cases -> cells, their ids, skips and the batches a graph cell replays on (cell_matrix),
one cell end to end and the eager form (run_cell), and the watchdog that ends a hanging cell's
worker (cell_watchdog). The matrix's test itself is harness/test_cases.py.

May import: base, checks, modes, fixtures, runners, case, bugs, ledger.
Imported by: search, speed, probes, session, harness/test_cases.py.
"""
