"""Real cells run with one thing changed: positive controls that break one thing on purpose
(controls), the key-census probe of sglang's merged partial states on a GPU (census_probe) and the
emulation of a two-part attention's rounding on a cell's own draws (census_cascade).

May import: every layer below it.
Imported by: tests only.
"""
