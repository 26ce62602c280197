"""`python -m tuitrain ...` for the suite, started from a fork server that has imported torch already.

A `tuitrain` process spends about 5 of its 5.5 CPU seconds importing torch (2.6 s) and torch._dynamo (2.2 s:
the first `torch.optim.Optimizer` imports it); the suite starts a few hundred of them. The fork server is one
Python process per test process, started with the environment the CLI's tests give (conftest.cli_env), that
imports torch and torch._dynamo once and then forks: each child sets the test's working directory,
environment, argv and standard streams (the test's own pipes or files, passed over a Unix socket) and runs
`tuitrain` as `python -m` does, then ends as an interpreter ends (atexit, threads joined, streams flushed).
What the child is, is what a fresh `python -m tuitrain` is: its own process, in the test process's process
group, its stdin/stdout/stderr the test's, its exit status the test's to read (the server reaps it and
writes the status down a pipe the test holds), signals sent to its pid.

What differs, and how it is kept out of what the tests check:
- torch was imported before the test's environment was set: a request whose environment differs from the
  server's in anything but TUITRAIN_* and PYTEST_* (a thread count, a CUDA setting, PYTHONPATH) runs as a
  fresh `python -m tuitrain` instead, as does everything when TUITRAIN_TEST_FORK=0;
- the random generators the interpreter seeds at start (`random`, numpy's) are seeded afresh in each child;
  torch's default generator is untouched in the server, so it starts at torch's fixed default seed as in a
  fresh process; str hashes share the server's seed (PYTHONHASHSEED is unset for every CLI test anyway).
Tests of the interpreter's start itself (which modules a command imports, how long it takes) start their
own `python` and never come here.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

# the server: reads requests, forks, reaps; in the child, falls out of the loop and runs tuitrain
SERVER = r"""
import json, os, select, socket, sys
import torch, torch._dynamo  # the 5 s a tuitrain process spends before its first line
sock = socket.socket(fileno=int(sys.argv[1]))
status = {}  # pid -> the write end of the pipe its exit status goes down
request = None
while request is None:
    while True:  # reap
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not pid:
            break
        fd = status.pop(pid, None)
        if fd is not None:
            os.write(fd, b"%d\n" % os.waitstatus_to_exitcode(st))
            os.close(fd)
    if not select.select([sock], [], [], 0.02)[0]:
        continue
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
    if not msg:
        sys.exit(0)  # the test process has gone
    pid = os.fork()
    if pid == 0:
        request = json.loads(msg)
        break
    for fd in fds[:3]:
        os.close(fd)
    status[pid] = fds[3]
    sock.send(b"%d" % pid)

# the child: the test's streams, directory, environment and argv, then tuitrain as `python -m` runs it
sock.close()
for fd in status.values():
    os.close(fd)
for target, fd in enumerate(fds[:3]):
    os.dup2(fd, target)
    os.close(fd)
os.close(fds[3])
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
import random
random.seed()
try:
    import numpy
    numpy.random.seed()
except ImportError:
    pass
import runpy
import tuitrain
sys.path[0] = os.getcwd()
sys.argv = [os.path.join(os.path.dirname(tuitrain.__file__), "__main__.py"), *request["args"]]
runpy.run_module("tuitrain", run_name="__main__", alter_sys=True)
"""

# what may differ between the server's environment and a request's without a fresh interpreter: names read
# only after tuitrain's import (tuitrain's own) and pytest's bookkeeping
_RUNTIME_ONLY = ("TUITRAIN_", "PYTEST_")


class ForkedProcess:
    """The part of `subprocess.Popen` the tests use, for a child of the fork server."""

    def __init__(self, args: list[str], pid: int, status_fd: int, stdout=None, stderr=None) -> None:
        self.args, self.pid, self._status = args, pid, status_fd
        self.stdout, self.stderr = stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None and self._ready(0) else self.returncode

    def _ready(self, timeout: float | None) -> bool:
        return bool(select.select([self._status], [], [], timeout)[0])

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ready(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            text = os.read(self._status, 64)
            os.close(self._status)
            self.returncode = int(text) if text.strip() else -signal.SIGKILL  # the server died: say killed
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        out = [f.read() if f is not None else None for f in (self.stdout, self.stderr)]
        self.wait(timeout)
        return out[0], out[1]

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc) -> None:
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        self.wait()


class ForkServer:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(theirs.fileno())],
            env=self.env,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.sock = mine
        self.lock = threading.Lock()

    def serves(self, env: dict[str, str]) -> bool:
        if self.proc.poll() is not None:
            return False
        names = set(env) | set(self.env)
        return all(env.get(k) == self.env.get(k) for k in names if not k.startswith(_RUNTIME_ONLY))

    def start(self, args: list[str], cwd: Path, env: dict[str, str], stdout: int, stderr: int) -> tuple[int, int]:
        """Fork a child with these streams (file descriptors, duplicated into it); (its pid, the read end of
        the pipe its exit status comes down)."""
        status_r, status_w = os.pipe()
        msg = json.dumps({"args": args, "cwd": str(cwd), "env": env}).encode()
        try:
            with self.lock:
                socket.send_fds(self.sock, [msg], [0, stdout, stderr, status_w])
                pid = int(self.sock.recv(64))
        finally:
            os.close(status_w)
        return pid, status_r

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_servers: dict[int, ForkServer] = {}  # by the test process's pid (one per pytest-xdist worker)


# the commands that import torch (the others start in a fraction of a second and never load it: they start fresh,
# so that what they find in sys.modules is what a user's finds)
TRAINS = {"run", "resume", "lr-find"}


def server_for(args: list[str], env: dict[str, str]) -> ForkServer | None:
    """The fork server that can start `tuitrain ARGS` with `env` (started on first use), or None: a fresh
    process then."""
    if os.environ.get("TUITRAIN_TEST_FORK", "1") == "0" or not args or args[0] not in TRAINS:
        return None
    server = _servers.get(os.getpid())
    if server is not None and not server.serves(env):
        if server.proc.poll() is None:
            return None  # another environment: this request only runs fresh
        server = None  # the server died: start another
    if server is None:
        server = _servers[os.getpid()] = ForkServer(env)
    return server


def cpu_seconds() -> float:
    """The CPU time of this test process's fork server and of the children it has reaped (Linux's /proc)."""
    server = _servers.get(os.getpid())
    if server is None or server.proc.poll() is not None:
        return 0.0
    try:
        fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def close_servers() -> None:
    server = _servers.pop(os.getpid(), None)
    if server is not None:
        server.close()


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess | None:
    """`subprocess.run(python -m tuitrain ARGS, capture_output=True, text=True)` through the fork server;
    None where it cannot serve this environment."""
    server = server_for(args, env)
    if server is None:
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid, status = server.start(args, cwd, env, out_w, err_w)
    finally:
        os.close(out_w)
        os.close(err_w)
    proc = ForkedProcess(args, pid, status)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = [out_r, err_r]
    deadline = time.monotonic() + timeout
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            proc.wait()
            for fd in open_fds:
                os.close(fd)
            raise subprocess.TimeoutExpired(args, timeout)
        for fd in select.select(open_fds, [], [], left)[0]:
            data = os.read(fd, 1 << 16)
            if data:
                chunks[fd].append(data)
            else:
                os.close(fd)
                open_fds.remove(fd)
    try:
        code = proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    text = [b"".join(chunks[fd]).decode(errors="replace") for fd in (out_r, err_r)]
    return subprocess.CompletedProcess(args, code, text[0], text[1])


def start(args: list[str], cwd: Path, env: dict[str, str], output) -> ForkedProcess | None:
    """`subprocess.Popen(python -m tuitrain ARGS, stdout=output, stderr=STDOUT)` through the fork server;
    None where it cannot serve this environment."""
    server = server_for(args, env)
    if server is None:
        return None
    pid, status = server.start(args, cwd, env, output.fileno(), output.fileno())
    return ForkedProcess(args, pid, status)
