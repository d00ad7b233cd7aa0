"""Kill-test children forked from one warm interpreter, instead of started cold.

A kill test starts a child a round (`tests.kills`), and a cold `python -c` child imports
stashpoint, boto3 and often a framework before its first request (LangGraph ~0.6 s, the
OpenAI Agents SDK ~2 s of CPU); the suite is CPU-bound, so that is suite time. The zygote
is one interpreter per test process that imports them once, then forks a child per
request. A child is still a real process of its own, with its own pid and pipes, that
runs the child's code as `python -c` would (`__main__`, `sys.argv`, the environment and
working directory of the moment it was asked for) and dies by SIGKILL like any other.

What differs from a cold start, and why it does not change what the tests check: the
modules are imported already (a fork copies them; the library renews what is per process
at a fork, `ids._new_process`), and `PYTHONPATH` given to a child is added to its
`sys.path` instead of being read at start. The zygote forks only while it runs no other
thread (it checks), so no lock is copied held.

`STASHPOINT_TESTS_COLD_CHILDREN=1` starts every child cold again (to compare, or to rule
the zygote out).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

PRELOAD = (
    "stashpoint",
    "stashpoint._backends.s3",
    "stashpoint._backends.local",
    "stashpoint.langgraph",
    "langgraph.graph",
    "agents",
    "strands",
    "temporalio.client",
)
"""What the zygote imports before it forks (each if it can be imported)."""

_SERVER = r"""
import builtins, importlib, io, json, os, signal, socket, sys, threading, traceback

path, preload = sys.argv[1], json.loads(sys.argv[2])
for name in preload:
    try:
        importlib.import_module(name)
    except Exception:
        pass
if threading.active_count() != 1:
    print("threads", flush=True)  # a preloaded module started one: forking is unsafe
    sys.exit(3)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(16)
print("ready", flush=True)


def run(request, out, err):
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1] = [p for p in extra if p not in sys.path]
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), line_buffering=False, write_through=unbuffered
    )
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.argv = ["-c", *request["args"]]
    status = 0
    try:
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


while True:
    conn, _ = server.accept()
    with conn:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 22, 2)
        while not message.endswith(b"\n"):
            message += conn.recv(1 << 22)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            server.close()
            conn.close()
            run(request, *fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
"""


class Child:
    """A forked child, as much of `subprocess.Popen` as the kill harness uses."""

    def __init__(self, pid: int, stdout: IO[Any], stderr: IO[bytes]) -> None:
        self.pid = pid
        """The child's process id."""
        self.stdout = stdout
        """The read end of its standard output."""
        self.stderr = stderr
        """The read end of its standard error."""

    def wait(self, timeout: float) -> None:
        """Wait until the process is gone (the zygote's kernel reaps it)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"child {self.pid}", timeout)
            time.sleep(0.002)


SHARED = "STASHPOINT_TESTS_ZYGOTE"
"""The environment variable naming the socket of a zygote the xdist controller started for
every worker (`start_shared`): one interpreter's imports instead of one per worker."""


class _Zygote:
    """A warm interpreter: this test process's own (started on first use, ended at exit),
    or the run's shared one (`path` given: its socket)."""

    def __init__(self, path: str | None = None) -> None:
        self.process: subprocess.Popen[str] | None = None
        if path is not None:
            self.folder, self.path, self.ready = "", path, True
            return
        self.folder = tempfile.mkdtemp(prefix="zygote-")
        self.path = os.path.join(self.folder, "s")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, self.path, json.dumps(PRELOAD)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        said = self.process.stdout.readline().strip()
        self.ready = said == "ready"
        atexit.register(self.close)

    def spawn(self, code: str, args: list[str], env: dict[str, str] | None, *, text: bool) -> Child:
        """Fork a child running `code` with `args`; its stdout (text or bytes) and stderr."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        request = {
            "code": code,
            "args": list(args),
            "env": dict(os.environ if env is None else env),
            "cwd": os.getcwd(),
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            message = json.dumps(request).encode() + b"\n"
            socket.send_fds(conn, [message[: 1 << 16]], [out_write, err_write])
            if len(message) > 1 << 16:
                conn.sendall(message[1 << 16 :])
            os.close(out_write)
            os.close(err_write)
            pid = int(conn.makefile("r").readline())
        stdout: IO[Any] = os.fdopen(out_read, "r" if text else "rb")
        return Child(pid, stdout, os.fdopen(err_read, "rb"))

    def close(self) -> None:
        """End the interpreter this process started (a shared one is its starter's)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            shutil.rmtree(self.folder, ignore_errors=True)


_zygote: _Zygote | None = None
_lock = threading.Lock()


def zygote() -> _Zygote | None:
    """Return this process's zygote (None: cold children were asked for, or it failed)."""
    global _zygote
    if os.environ.get("STASHPOINT_TESTS_COLD_CHILDREN"):
        return None
    with _lock:
        if _zygote is None:
            _zygote = _Zygote(os.environ.get(SHARED))
        return _zygote if _zygote.ready else None


def start_shared() -> _Zygote | None:
    """Start the run's zygote and name it to the processes started after (the workers).

    None if it could not start (a preloaded module started a thread): each worker then
    forks from one of its own, or starts its children cold.
    """
    if os.environ.get("STASHPOINT_TESTS_COLD_CHILDREN"):
        return None
    shared = _Zygote()
    if not shared.ready:
        shared.close()
        return None
    os.environ[SHARED] = shared.path
    return shared
