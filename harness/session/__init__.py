"""A run from start to record: pytest's hooks that collect the cells, judge failures and account for
every cell (pytest_plugin), recording a run's outputs into reports/ (record) and the same cells on
every sglang release (versions).

May import: every layer below it.
Imported by: harness/__main__.py (`python -m harness record`) and /conftest.py's pytest_plugins.
"""
