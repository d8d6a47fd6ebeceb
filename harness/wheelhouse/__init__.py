"""Offline wheelhouse for the air-gapped GPU runner.

The runner has no network and receives files in transfers of at most 64 MiB, while the
wheels it needs (sglang, sglang-kernel with its 1.1 GB FA3 library, FlashInfer, the CuTe DSL
stack for FA4, and the light packages on sglang's import path) add up to about 1.7 GB. This
package turns the pinned list ``gpu_pins.txt`` into one solid zstd archive split into numbered
parts, plans which parts travel in which transfer, and installs them on the runner with the
standard library alone (plus the carried ``zstandard`` wheel). RUNBOOK.md says how.

Modules, one job each: ``pins`` (read gpu_pins.txt), ``fetch`` (pip download), ``repack``
(stored re-zip, sglang-kernel slimming), ``parts`` (split/join/hash), ``manifest`` (the JSON
that ties it together), ``stages`` (transfer batches), ``transfer`` (one stage into the
carried folder), ``build`` and ``install`` (the two ends), ``zstd_boot`` (zstandard from the
carried wheel), ``sitepaths`` (the PYTHONPATH line), ``verify``/``probe`` (smoke imports on
the runner), ``table`` (printing).
"""
