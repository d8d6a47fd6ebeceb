"""What judges a cell: the torch oracle (reference), the comparison with its tolerances and the key
census (compare), the metadata invariants and capacity checks (invariants), canary zones (guards)
and the graph buffers a backend allocates (graph_buffers). Tests: each detector's positive controls.

May import: base.
Imported by: modes (the reference's queries), fixtures, runners, ledger, cell, probes.
"""
