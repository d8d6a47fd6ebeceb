"""What keeps a run fast (docs/speed.md): the warm-up pass that compiles once per machine (warmup),
workers forked from a pre-imported server (fork_server, fork_server_plugin), one GPU per worker
(gpu_slots), workers that leave without teardown (worker_exit) and the benchmark (bench, bench_timer).

May import: every layer below it, reporting included (the benchmark's tables).
Imported by: probes, session, and `python -m harness run`.
"""
