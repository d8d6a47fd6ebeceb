"""Workers forked from a pre-imported server (harness/speed/fork_server.py): what a worker gets, what it
gives back, and the plain interpreter wherever no worker can be forked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness import ROOT
from harness.speed import fork_server
from harness.speed.fork_server_plugin import SERVER_LOG

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="abstract unix sockets and fd passing: Linux")

# What a worker reports: its parent, whether the server's pre-import reached it, its cwd, an
# environment variable of the caller, its argv and a line of its stdin.
REPORT = ("import json, os, sys; line = input(); "
          "print(json.dumps({'parent': os.getppid(), 'preimported': 'decimal' in sys.modules, 'cwd': os.getcwd(), "
          "'marker': os.environ.get('FORK_TEST_MARKER'), 'argv': sys.argv, 'line': line}))")


def _start_server(name: str, refuse: bool = False) -> subprocess.Popen:
    """A server that pre-imports one small module; `refuse` makes it believe its imports started CUDA."""
    pretend = "fork_server._cuda_started = lambda: True; " if refuse else ""
    server = subprocess.Popen(
        [sys.executable, "-c", f"from harness.speed import fork_server; {pretend}fork_server.serve({name!r}, ('decimal',))"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert json.loads(server.stdout.readline())["fork_server"] == server.pid  # imports done, serving
    return server


@pytest.fixture
def server():
    name = fork_server.new_name()
    process = _start_server(name)
    yield name, process
    process.terminate()
    process.wait(timeout=10)


def _worker(name: str, *command: str, tmp_path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*fork_server.connect_command(name), "-u", "-c", *command], cwd=tmp_path, text=True,
                          capture_output=True, env={**os.environ, "FORK_TEST_MARKER": "m1", "PYTHONPATH": str(ROOT)},
                          timeout=60, **kwargs)


def test_a_forked_worker_is_the_process_it_was_asked_for(server, tmp_path):
    name, process = server
    done = _worker(name, REPORT, "extra", tmp_path=tmp_path, input="from stdin\n")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {"parent": process.pid, "preimported": True, "cwd": str(tmp_path), "marker": "m1",
                      "argv": ["-c", "extra"], "line": "from stdin"}


def test_a_forked_workers_exit_status_comes_back(server, tmp_path):
    name, _ = server
    assert _worker(name, "import sys; sys.exit(3)", tmp_path=tmp_path).returncode == 3
    failed = _worker(name, "raise ValueError('boom')", tmp_path=tmp_path)
    assert failed.returncode == 1 and "ValueError: boom" in failed.stderr


def test_a_signal_to_the_caller_reaches_the_forked_worker(server, tmp_path):
    name, _ = server
    caller = subprocess.Popen([*fork_server.connect_command(name), "-u", "-c", "print('ready'); input()"],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert caller.stdout.readline().strip() == "ready"
    caller.send_signal(signal.SIGTERM)
    assert caller.wait(timeout=30) == -signal.SIGTERM


def test_without_a_server_the_caller_becomes_a_plain_interpreter(tmp_path):
    done = _worker(fork_server.new_name(), REPORT, tmp_path=tmp_path, input="x\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["parent"] == os.getpid()  # exec'd in place: the test's own child


def test_a_server_whose_imports_started_cuda_forks_nothing(tmp_path):
    name = fork_server.new_name()
    process = _start_server(name, refuse=True)
    try:
        done = _worker(name, REPORT, tmp_path=tmp_path, input="x\n")
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["parent"] == os.getpid()


# Eight cells that a CPU run skips (bf16 in Triton's interpreter) and a GPU run executes.
FEW_CELLS = ("harness/test_cases.py", "-k", "draft_decode and triton and bs1 and bfloat16")


def test_an_xdist_run_forks_its_workers(harness_run, tmp_path):
    """The plugin end to end: every worker of `-n 2` is one the server forked, and says so in its log."""
    times = tmp_path / "times.jsonl"
    done, folder, _ = harness_run("-n", "2", "--worker-start", "fork", "-p", "harness.speed.bench_timer", *FEW_CELLS,
                                  env={"ATTN_HARNESS_BENCH_TIMES": str(times)})
    assert done.returncode == 0, done.stdout[-2000:]
    log = [json.loads(line) for line in (folder / SERVER_LOG).read_text().splitlines()]
    assert log[0]["cuda_started_by"] is None and "torch" in log[0]["seconds"]
    forked = {line["forked"] for line in log[1:]}
    workers = {json.loads(line)["pid"] for line in times.read_text().splitlines() if json.loads(line)["worker"]}
    assert len(workers) == 2 and workers <= forked


def test_worker_start_exec_leaves_xdist_alone(harness_run):
    done, folder, _ = harness_run("-n", "2", "--worker-start", "exec", *FEW_CELLS)
    assert done.returncode == 0, done.stdout[-2000:]
    assert not (folder / SERVER_LOG).exists()


def test_the_caller_waits_for_the_server_that_is_still_importing(tmp_path):
    """A worker asked for while the server imports is forked once the imports are done."""
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(2)\n")
    name = fork_server.new_name()
    slow = subprocess.Popen([sys.executable, "-c", f"from harness.speed import fork_server; fork_server.serve({name!r}, ('slow_to_import',))"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    try:
        time.sleep(0.5)  # listening, still importing
        done = _worker(name, REPORT, tmp_path=tmp_path, input="x\n")
    finally:
        slow.terminate()
        slow.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["parent"] == slow.pid


class _Driver:
    def __init__(self, status):
        self.status = status

    def cuDeviceGetCount(self, _count):
        return self.status


@pytest.mark.parametrize("mapped, driver, started", [
    (False, None, False),  # no driver library: nothing started
    (True, _Driver(fork_server.CUDA_ERROR_NOT_INITIALIZED), False),  # torch's import loads it: not a start
    (True, _Driver(0), True),  # the driver answers: something called cuInit
    (True, OSError("cannot be asked"), True),  # loaded but not reachable: counted as started
])
def test_cuda_counts_as_started_only_when_the_driver_was_initialised(monkeypatch, tmp_path, mapped, driver, started):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 0:0 0 /usr/lib/x86_64-linux-gnu/libcuda.so.1\n" * mapped
                    + "7f02-7f03 r-xp 0 0:0 0 /usr/lib/libc.so.6\n")
    real_open = open
    monkeypatch.setattr(fork_server, "open", lambda path, *args: real_open(maps if path == "/proc/self/maps" else path, *args),
                        raising=False)

    def load(path, mode):
        assert mode & os.RTLD_NOLOAD  # never loads a driver that is not there
        if isinstance(driver, Exception):
            raise driver
        return driver

    monkeypatch.setattr(fork_server.ctypes, "CDLL", load)
    assert fork_server._cuda_started() is started


def test_cuda_counts_as_started_when_torch_started_it(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert fork_server._cuda_started()
