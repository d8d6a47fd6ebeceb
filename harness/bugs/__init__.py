"""Bugs and fixes: the seed bugs re-injected into sglang and the fixes proposed for it (seed_bugs),
their replay and kill table (replay: python -m harness.bugs.replay), and the packets under findings/
(finding_packets, findings).

May import: the layers below it (base, checks, modes, fixtures, runners, case); it uses base and modes.
Imported by: ledger, search, session, and `python -m harness findings`.
"""
