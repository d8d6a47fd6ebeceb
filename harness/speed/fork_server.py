"""Worker processes forked from a parent that has already imported the heavy libraries.

Every pytest-xdist worker on the H200 spent 15-17 s importing (16 at once), most of it in torch,
transformers, sympy, scipy and the libraries they pull in (reports/gpu/NOTES.md, 2026-11-26),
the same modules in every worker. This server imports them once, then forks a worker per request,
so a worker starts with them in memory and imports only what must be its own: sglang, which
starts CUDA while importing (a CUDA context cannot cross a fork), and the harness: on the H200 a
worker that imports sglang's attention layer, memory pool and ForwardBatch and runs one CUDA op
starts in 2.8 s forked, 12.2 s as a fresh interpreter. The server never starts CUDA itself: after
every import it asks torch and the driver whether CUDA was started, and it stops forking (every
worker then starts as a plain interpreter) if it was.

A worker is asked for the way execnet starts one, `PYTHON -u -c BOOTSTRAP`, where PYTHON is
`python -m harness.speed.fork_server connect NAME` (pytest-xdist's `popen//python=` spec): the
connecting process hands the server its stdin, stdout and stderr and its working directory and
environment, the forked child takes them over and runs the bootstrap, and the connecting process
waits for the child and exits with its status, passing on the signals it gets. Whenever the
server cannot be reached or will not fork, the connecting process becomes the plain interpreter
itself (exec), so a worker always starts. The address is in Linux's abstract socket namespace
(nothing written on disk) and the server forks only for processes of its own user.
"""

from __future__ import annotations

import atexit
import ctypes
import io
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
import types

# What a worker imports that holds no CUDA state, about in the order a worker meets it: the
# third-party modules that sglang's attention layers, memory pool and the harness pull in, measured
# with -X importtime on the H200 (sglang 0.5.23, 2026-11-26). Never sglang, sgl_kernel or
# flashinfer: they query the GPU while importing.
PREIMPORTS = (
    "torch", "numpy", "sympy", "torch.fx.experimental.symbolic_shapes", "torch._dynamo",
    "torch.distributed.tensor", "torch._inductor.compile_fx", "functorch.compile", "networkx",
    "transformers", "transformers.activations", "transformers.generation.candidate_generator",
    "transformers.modeling_layers", "transformers.modeling_gguf_pytorch_utils",
    "scipy.stats", "scipy.sparse", "scipy.special", "sklearn.metrics", "pandas", "torchvision.io",
    "requests", "aiohttp", "triton", "pytest", "xdist.remote", "execnet", "yaml", "pydantic", "hypothesis",
)
CONNECT_WAIT_S = 120.0  # how long a connecting process waits for the server's imports
_HEADER = struct.Struct("!I")
_STDIO = 3


def new_name() -> str:
    """A fresh server name, unique on this host."""
    return f"attn-harness-fork-{os.getpid()}-{os.urandom(6).hex()}"


def _address(name: str) -> str:
    """The name's address in Linux's abstract socket namespace (leading NUL: no file, gone with the server)."""
    return "\0" + name


def serve_command(name: str) -> list[str]:
    return [sys.executable, "-m", "harness.speed.fork_server", "serve", name]


def connect_command(name: str) -> list[str]:
    """The interpreter command a worker is started with instead of `python`."""
    return [sys.executable, "-m", "harness.speed.fork_server", "connect", name]


def _send_message(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [_HEADER.pack(len(data)) + data], list(fds))


def _receive_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    data, fds, _flags, _peer = socket.recv_fds(sock, 1 << 20, max_fds)
    if len(data) < _HEADER.size:
        for fd in fds:
            os.close(fd)
        return None, []
    (length,) = _HEADER.unpack_from(data)
    while len(data) < _HEADER.size + length:
        more = sock.recv(_HEADER.size + length - len(data))
        if not more:
            return None, fds
        data += more
    return json.loads(data[_HEADER.size:_HEADER.size + length]), fds


# ---- the server -------------------------------------------------------------------------------

def _tell(conn: socket.socket, message: dict) -> None:
    """Send to a connecting process that may have gone (killed while it waited): not the server's failure."""
    try:
        _send_message(conn, message)
    except OSError:
        pass


CUDA_ERROR_NOT_INITIALIZED = 3  # cuda.h: what a driver call returns before cuInit


def _cuda_started() -> bool:
    """Whether this process has started CUDA, which a forked child could then not use: torch started
    it, or the driver was initialised some other way (`torch.cuda.is_available()` does so without
    torch counting it). torch loads the driver library at import, so its presence says nothing; a
    driver call that needs initialisation says it, and answers without initialising. A driver that
    is loaded but cannot be asked counts as started."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "libcuda.so" in line})
    except OSError:
        return False
    for path in paths:
        try:
            driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        return driver.cuDeviceGetCount(ctypes.byref(ctypes.c_int())) != CUDA_ERROR_NOT_INITIALIZED
    return bool(paths)


def preimport(names=PREIMPORTS) -> dict:
    """Import each module, as the workers would; stop at the first that starts CUDA."""
    seconds, missing = {}, []
    for name in names:
        began = time.perf_counter()
        try:
            __import__(name)
        except Exception:  # an optional library this stack lacks: its workers do not need it
            missing.append(name)
            continue
        seconds[name] = round(time.perf_counter() - began, 3)
        if _cuda_started():
            return {"seconds": seconds, "missing": missing, "cuda_started_by": name}
    return {"seconds": seconds, "missing": missing, "cuda_started_by": None}


def _die_with_parent() -> None:
    """Linux: the server (and so its forks' source) ends when the pytest process that started it ends."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _run_worker(request: dict, fds: list[int]) -> int:
    """In the forked child: become the process execnet asked for (`python [-u] [-B] -c COMMAND`)
    and run its bootstrap."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    at = argv.index("-c")
    flags, command, args = argv[:at], argv[at + 1], argv[at + 2:]
    sys.dont_write_bytecode = "-B" in flags or sys.dont_write_bytecode
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False), write_through=True,
                                  errors="backslashreplace")
    sys.argv = ["-c", *args]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(command, "<string>", "exec"), main.__dict__)
        return 0
    except SystemExit as leaving:
        if leaving.code is None or isinstance(leaving.code, int):
            return leaving.code or 0
        print(leaving.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _fork(request: dict, fds: list[int], servers: list) -> int:
    """Fork a worker; `servers` are the server's own sockets and selector, which the worker closes."""
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    code = 1
    try:
        for held in servers:
            held.close()
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        code = _run_worker(request, fds)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve(name: str, names=PREIMPORTS) -> None:
    """Listen at once (a worker may connect while the imports run), import, then fork on request
    until terminated; each connection is told its child's pid and, later, its exit status."""
    _die_with_parent()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(name))
    listener.listen(256)
    # A library that asks torch.cuda.is_available() while importing would start the driver here:
    # torch then asks NVML instead (the workers' own environment, restored in each, does not say so).
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    imported = preimport(names)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
    print(json.dumps({"fork_server": os.getpid(), "threads": threads, **imported}), flush=True)
    children: dict[int, socket.socket] = {}
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while not stopping:
        for _key, _events in selector.select(timeout=0.05):
            conn, _ = listener.accept()
            conn.settimeout(5.0)  # a connection that sends no request must not stall the others
            try:
                request, fds = _receive_message(conn, _STDIO)
            except OSError:
                conn.close()
                continue
            if request is None or len(fds) != _STDIO or not _same_user(conn) or imported["cuda_started_by"]:
                for fd in fds:
                    os.close(fd)
                _tell(conn, {"refused": True})
                conn.close()
                continue
            pid = _fork(request, fds, [listener, selector, conn, *children.values()])
            children[pid] = conn
            _tell(conn, {"pid": pid})
            print(json.dumps({"forked": pid}), flush=True)
        _reap(children, block=False)
    for pid in children:
        os.kill(pid, signal.SIGKILL)  # a worker still alive once pytest has finished is stuck
    _reap(children, block=True)


def _reap(children: dict[int, socket.socket], block: bool) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            _tell(conn, {"exit": os.waitstatus_to_exitcode(status)})
            conn.close()


# ---- the connecting process -------------------------------------------------------------------

def _plain_interpreter(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def _connected(name: str) -> socket.socket | None:
    deadline = time.monotonic() + 2.0  # the server binds before importing: it is there or it is not
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(_address(name))
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def connect(name: str, argv: list[str]) -> int:
    """Ask the server for a forked worker running `python argv`; wait for it and return its status.

    The plain interpreter takes over where no worker can have been forked (no server, or its
    refusal), never after a request went unanswered: a late fork would then share this process's
    pipes with it."""
    sock = _connected(name)
    if sock is None:
        _plain_interpreter(argv)
    sock.settimeout(CONNECT_WAIT_S)
    _send_message(sock, {"cwd": os.getcwd(), "env": dict(os.environ), "argv": argv}, range(_STDIO))
    try:
        reply, _ = _receive_message(sock)
    except TimeoutError:
        print(f"attn-harness fork server {name}: no worker within {CONNECT_WAIT_S:.0f} s", file=sys.stderr)
        return 1
    if not reply or "pid" not in reply:
        sock.close()
        _plain_interpreter(argv)
    child = reply["pid"]
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in range(_STDIO - 1):  # the child holds the pipes now: their ends must close with it alone
        os.dup2(devnull, fd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: os.kill(child, number))
    sock.settimeout(None)
    reply, _ = _receive_message(sock)
    code = int(reply["exit"]) if reply else 1
    if code < 0:  # the worker died of a signal: so does this process, for whoever waits on it
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the worker's core is the one that matters
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def main(argv: list[str]) -> int:
    role, name, *rest = argv
    if role == "serve":
        serve(name)
        sys.stdout.flush()
        os._exit(0)  # the run waits for this process: no interpreter teardown of torch and the rest (seconds)
    return connect(name, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
