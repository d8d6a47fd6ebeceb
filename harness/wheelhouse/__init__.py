"""Offline wheelhouse for the air-gapped GPU runner, one per sglang release.

The runner has no network and receives files in calls of at most 64 MiB, while the wheels it
needs (for sglang 0.5.23: torch 2.14.1, triton 3.8, sglang-kernel with its 1.1 GB FA3 library,
FlashInfer, NCCL, the CuTe DSL stack for FA4, and the light packages on sglang's import path)
add up to about 1.7 GB. This package turns a release's pins (``pins/sglang-<release>.txt``)
into one zstd archive split into numbered parts, plans which parts travel in which call,
tells on the runner which stages have arrived, and installs them there with the standard
library alone (plus the carried ``zstandard`` wheel). RUNBOOK.md says how.

Modules, one job each: ``pins`` (read the pins files), ``fetch`` (pip download), ``repack``
(stored re-zip, slimming), ``parts`` (split/join/hash), ``manifest`` (the JSON that ties it
together), ``stages`` (transfer batches), ``transfer`` (one stage into the carried folder, the
runner commands), ``received`` (which stages are on the runner), ``build`` and ``install``
(the two ends), ``zstd_boot`` (zstandard from the carried wheel), ``sitepaths`` (PYTHONPATH
and LD_LIBRARY_PATH), ``verify``/``probe`` (smoke check on the runner), ``table`` (printing).
"""
