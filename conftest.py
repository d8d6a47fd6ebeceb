"""Repository-level pytest hooks live in harness/session/pytest_plugin.py."""

import harness  # noqa: F401  (switches Triton to its CPU interpreter before torch loads)

pytest_plugins = ["harness.session.pytest_plugin", "harness.search.generated_plugin", "harness.speed.worker_exit", "harness.speed.fork_server_plugin"]
