"""Repository-level pytest hooks live in harness/pytest_plugin.py."""

import harness  # noqa: F401  (switches Triton to its CPU interpreter before torch loads)

pytest_plugins = ["harness.pytest_plugin", "harness.generated_plugin", "harness.worker_exit", "harness.fork_server_plugin"]
