"""Case files -> validated cases: reading YAML without silent overwrites (case_yaml), the loader and
its sweeps (cases), size limits with their reasons (case_limits), the traits ledger entries select on
(case_traits). What production reaches, from the scheduler's rules, is harness/modes/scheduler_rules.py:
the modes' own contracts (a DFlash reservation) read it too.

May import: base, checks, modes, fixtures, runners (the loader checks a file against the registries).
Imported by: ledger, cell, search, reporting, speed, probes, session.
"""
