"""Reports built from the cell records that the pytest plugin writes.

One module per report: `merge` (cell lines -> results.json + JUnit), `summary` (SUMMARY.md),
`heatmap` (matrix.png), `readme_matrix` (the matrix on docs/results.md), `digest` (night-over-night
comparison). `cell_schema` is the record contract they all read through, and `matrix` the one
aggregation they all draw from. Run them with `python -m harness.reporting <subcommand>`.
"""
