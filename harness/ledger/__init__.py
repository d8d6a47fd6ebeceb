"""The ledger: KNOWN_FAILURES.md parsed and held to its signatures (known_failures), the one registry
of failure classes (failure_class), every collected cell given a status (accounting), crashed cells
re-run alone (lone_run) and under compute-sanitizer (sanitizer).

May import: base, checks, modes, fixtures, runners, case, bugs.
Imported by: cell, search, reporting, session.
"""
