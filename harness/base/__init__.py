"""The ground every layer stands on: where the harness runs (platform, kernel caches), which sglang
release is installed and its contracts (releases), where runs write (results), what every command
line shares (cli), host<->device copies (transfers) and the case as a value (case_spec).

May import: nothing of the harness (harness/__init__.py sits here too, importing base alone).
Imported by: every layer above.
"""
