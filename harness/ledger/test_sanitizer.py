"""Sanitizer re-runs, on CPU: reading compute-sanitizer's output, and the wiring with a stand-in binary.

The samples follow compute-sanitizer's own layout (CUDA 12.x): a "=========" prefix on every
line of its voice, a finding as a header line (prefix and one space) with indented details, host
backtraces, framing lines, and the program's own output interleaved when it logs to stdout.
"""

from __future__ import annotations

import os
import stat
import textwrap

import pytest

from harness.base.results import RUN_ID_ENV
from harness.ledger.sanitizer import cannot_run, error_blocks, find_binary, sanitize, unavailable_reason

MEMCHECK_LOG = """\
========= COMPUTE-SANITIZER
harness/test_cases.py F
========= Invalid __global__ write of size 4 bytes
=========     at _store_one+0x70 in /work/attn-harness/harness/cell.py:128
=========     by thread (0,0,0) in block (0,0,0)
=========     Access to 0x0 is out of bounds
=========     and is 127,443,869,892,608 bytes before the nearest allocation at 0x73e8a3e00000 of size 16 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dfbef] in libcuda.so.1
=========         Host Frame: [0x4a11] in /root/.triton/cache/6a3c/__triton_launcher.so
=========         Host Frame: _PyObject_MakeTpCall [0x1fb0b4] in python3.12
=========
========= Invalid __global__ read of size 16 bytes
=========     at _fwd_kernel+0x1c20 in /usr/lib/python3/sglang/srt/layers/attention/triton_ops/extend_attention.py:210
=========     by thread (32,0,0) in block (3,1,0)
=========     Address 0x7f3a1c000400 is out of bounds
=========
========= Target application returned an error
========= ERROR SUMMARY: 2 errors
"""

# The older layout (CUDA 11.x / early 12): frame lines split over two prefixed lines.
MEMCHECK_OLD_LAYOUT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at 0xda0 in /opt/sglang/python/sglang/srt/layers/attention/triton_ops/decode_attention.py:175:_fwd_grouped_kernel_stage1
=========     by thread (96,0,0) in block (44,0,0)
=========     Address 0x763995f9f000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame: [0x2f26f0]
=========                in /usr/lib/x86_64-linux-gnu/libcuda.so.1
========= ERROR SUMMARY: 1 error
"""

RACECHECK_LOG = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at _fwd_kernel+0x2b80 in extend_attention.py:301
=========     and Read access at _fwd_kernel+0x2c10 in extend_attention.py:305 [128 hazards]
========= 
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

CLEAN_LOG = """\
========= COMPUTE-SANITIZER
============================= test session starts ==============================
1 passed in 41.20s
========= ERROR SUMMARY: 0 errors
"""


def test_first_error_block_is_the_first_finding_without_host_frames():
    blocks = error_blocks(MEMCHECK_LOG)
    assert len(blocks) == 2
    assert blocks[0] == (
        "Invalid __global__ write of size 4 bytes\n"
        "at _store_one+0x70 in /work/attn-harness/harness/cell.py:128\n"
        "by thread (0,0,0) in block (0,0,0)\n"
        "Access to 0x0 is out of bounds\n"
        "and is 127,443,869,892,608 bytes before the nearest allocation at 0x73e8a3e00000 of size 16 bytes")
    assert blocks[1].startswith("Invalid __global__ read of size 16 bytes\nat _fwd_kernel+0x1c20")


def test_older_layout_and_racecheck_blocks():
    [block] = error_blocks(MEMCHECK_OLD_LAYOUT)
    assert block.splitlines()[-1] == "Address 0x763995f9f000 is out of bounds" and "Host Frame" not in block
    [race] = error_blocks(RACECHECK_LOG)
    assert race == ("Error: Race reported between Write access at _fwd_kernel+0x2b80 in extend_attention.py:301\n"
                    "and Read access at _fwd_kernel+0x2c10 in extend_attention.py:305 [128 hazards]")


def test_clean_run_and_pytest_separators_are_not_findings():
    assert error_blocks(CLEAN_LOG) == []


def test_cannot_run_is_one_line():
    log = "========= COMPUTE-SANITIZER\n========= Error: Device not supported\n"
    assert cannot_run(log) == "Error: Device not supported"
    assert cannot_run(MEMCHECK_LOG) is None


def test_unavailable_reasons():
    assert unavailable_reason(False, "/usr/local/cuda/bin/compute-sanitizer").startswith("no CUDA GPU on this machine")
    assert unavailable_reason(True, None).startswith("compute-sanitizer not found on PATH")
    assert unavailable_reason(True, "/usr/local/cuda/bin/compute-sanitizer") is None


def _executable(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_find_binary_in_a_cuda_toolkit(tmp_path):
    assert find_binary({"PATH": str(tmp_path)}) in (None, "/usr/local/cuda/bin/compute-sanitizer")
    binary = _executable(tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer", "#!/bin/sh\n")
    assert find_binary({"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path / "cuda")}) == str(binary)


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    """A stand-in compute-sanitizer on PATH: writes a canned log per --tool to --log-file, runs nothing."""
    monkeypatch.setenv(RUN_ID_ENV, "sanitizer-test")
    logs = {"memcheck": MEMCHECK_LOG, "racecheck": RACECHECK_LOG}

    def install(device_supported=True):
        unsupported = "========= COMPUTE-SANITIZER\n========= Error: Device not supported\n"
        for tool, text in logs.items():
            (tmp_path / f"{tool}.txt").write_text(text if device_supported else unsupported)
        _executable(tmp_path / "bin" / "compute-sanitizer", textwrap.dedent(f"""\
            #!/bin/sh
            while [ $# -gt 0 ]; do
              case "$1" in --tool) tool=$2; shift;; --log-file) log=$2; shift;; esac; shift
            done
            cp {tmp_path}/$tool.txt "$log"
            exit 1
        """))
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    return install


RECORDS = [
    {"cell_id": "a", "status": "passed", "nodeid": "harness/test_cases.py::test_cell[a]"},
    {"cell_id": "b", "status": "crashed", "nodeid": "harness/test_cases.py::test_cell[b]"},
    {"cell_id": "c", "status": "failed", "nodeid": "harness/test_cases.py::test_cell[c]"},
]


def test_sanitize_attaches_each_tools_first_error(fake_sanitizer, tmp_path):
    fake_sanitizer()
    said = []
    notes, unavailable = sanitize(RECORDS, ["memcheck", "racecheck"], [], budget=1, logs=tmp_path / "logs",
                                  say=said.append, has_gpu=True)
    assert unavailable is None
    assert list(notes) == ["b"]  # crashed or failed only, within the budget
    assert notes["b"]["sanitizer"]["memcheck"] == error_blocks(MEMCHECK_LOG)[0]
    assert notes["b"]["sanitizer"]["racecheck"].startswith("Error: Race reported between Write access")
    assert said[0].startswith("memcheck: b: Invalid __global__ write of size 4 bytes (log: ")


def test_sanitize_says_in_one_line_when_it_cannot_run(fake_sanitizer, tmp_path):
    fake_sanitizer(device_supported=False)
    notes, unavailable = sanitize(RECORDS, ["memcheck"], [], budget=3, logs=tmp_path / "logs",
                                  say=print, has_gpu=True)
    assert (notes, unavailable) == ({}, "sanitizer cannot run on this machine: Error: Device not supported")
    assert sanitize(RECORDS, ["memcheck"], [], 3, tmp_path, print, has_gpu=False) == (
        {}, "sanitizer not run: no CUDA GPU on this machine (compute-sanitizer checks CUDA kernels)")


def test_a_gpu_run_reruns_its_crashed_cells_under_memcheck_by_default(monkeypatch):
    """Left out, --sanitize means memcheck for crashed cells on a GPU host and nothing on a CPU; 'none' is off."""
    from harness.base import platform
    from harness.session import pytest_plugin

    monkeypatch.setattr(platform, "HAS_GPU", True)
    assert pytest_plugin._sanitizer_plan(None) == (("memcheck",), ("crashed",))
    assert pytest_plugin._sanitizer_plan("none") == ((), ())
    assert pytest_plugin._sanitizer_plan("memcheck,racecheck") == (("memcheck", "racecheck"), ("crashed", "failed"))
    monkeypatch.setattr(platform, "HAS_GPU", False)
    assert pytest_plugin._sanitizer_plan(None) == ((), ())


def test_the_default_rerun_takes_crashes_only_and_is_silent_without_one(fake_sanitizer, tmp_path):
    from harness.ledger.sanitizer import AUTO_STATUSES, AUTO_TOOLS

    fake_sanitizer()
    said = []
    notes, _ = sanitize(RECORDS, AUTO_TOOLS, [], budget=3, logs=tmp_path / "logs", say=said.append, has_gpu=True,
                        statuses=AUTO_STATUSES)
    assert list(notes) == ["b"]  # the crashed cell, not the failed one
    quiet = sanitize([RECORDS[0], RECORDS[2]], AUTO_TOOLS, [], 3, tmp_path / "logs", said.append, has_gpu=False,
                     statuses=AUTO_STATUSES)
    assert quiet == ({}, None) and len(said) == 1  # no crash: no line, not even "cannot run here"
