"""`python -m tuitrain ...` for the suite, started from a fork server that has imported torch already.

A `tuitrain` process spends about 5 of its 5.5 CPU seconds importing torch (2.6 s) and torch._dynamo (2.2 s:
the first `torch.optim.Optimizer` imports it); the suite starts a few hundred of them. The fork server is one
Python process per test process, started with the environment the CLI's tests give (conftest.cli_env), that
imports torch and torch._dynamo once and then forks: each child sets the test's working directory,
environment, argv and standard streams (the test's own pipes or files, passed over a Unix socket) and runs
`tuitrain` as `python -m` does, then ends as an interpreter ends (atexit, threads joined, streams flushed).
What the child is, is what a fresh `python -m tuitrain` is: its own process, in the test process's process
group, its stdin/stdout/stderr the test's, its exit status the test's to read (the server reaps it and
writes the status down a pipe the test holds), signals sent to its pid. A user's script that imports torch
(`python SCRIPT ARGS`) starts the same way (conftest.python_popen). In a pseudo-terminal (conftest.python_in_pty,
pty.fork's stand-in) the child is what pty.fork's is: the test process's own child (the server forks it from a
middle process that ends at once, while the test process is a child subreaper: the kernel gives the orphan to
it, and only then does the child go on), so os.waitpid and os.kill reach it; the leader of a session of its own
whose controlling terminal is the pty (setsid, then TIOCSCTTY), its stdin, stdout and stderr the pty's slave.

What differs, and how it is kept out of what the tests check:
- torch was imported before the test's environment was set: a request whose environment differs from the
  server's in a name its start may read (a thread count, a CUDA setting, PYTHONPATH: any but _RUNTIME_ONLY's
  TUITRAIN_*, PYTEST_*, the terminal's size and type, ...) runs as a fresh `python ...` instead, as does
  everything when TUITRAIN_TEST_FORK=0; the second request in another environment starts a server of its own
  (up to MAX_SERVERS a test process: a library a test imports may set a variable in os.environ for good, and
  every later request then differs from the first server's);
- what the server's imports made is frozen (gc.freeze, as Python's documentation has it for a process that
  forks without exec): a child's garbage collections, its interpreter's end's above all, leave those objects
  out, where a fresh process's go over them (a child's end cost ~1.1 CPU s of walking torch's objects, and
  wrote to each page of them it shares with the server; ~0.4 CPU s frozen). They are never garbage; what
  differs is the time a collection takes, not what it collects;
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

# the server: reads requests, forks, reaps; in the child, returns from serve() and runs the request's Python
SERVER = r"""
import json, os, select, socket, sys
import torch, torch._dynamo  # the 5 s a tuitrain process spends before its first line
import gc
gc.collect()
gc.freeze()  # what the imports made, kept out of every child's collections (see the module's docstring)
sock = socket.socket(fileno=int(sys.argv[1]))
status = {}  # pid -> the write end of the pipe its exit status goes down


def serve():
    while True:
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
        request = json.loads(msg)
        if request.get("adopt"):
            # the test process's own child: forked from a middle process that ends at once, so that the kernel
            # gives it to the test process (a child subreaper while it asks)
            r, w = os.pipe()
            go_r, go_w = os.pipe()  # the child starts at EOF: once it is the test process's
            middle = os.fork()
            if middle == 0:
                os.close(r)
                pid = os.fork()
                if pid == 0:
                    os.close(w)
                    os.close(go_w)
                    os.read(go_r, 1)
                    os.close(go_r)
                    return request, fds
                os.write(w, b"%d" % pid)
                os._exit(0)
            os.close(w)
            os.close(go_r)
            pid = int(os.read(r, 64))
            os.close(r)
            os.waitpid(middle, 0)  # it has ended: its child is the test process's now
            os.close(go_w)
            for fd in fds:
                os.close(fd)
            sock.send(b"%d" % pid)
            continue
        pid = os.fork()
        if pid == 0:
            return request, fds
        for fd in fds[:3]:
            os.close(fd)
        status[pid] = fds[3]
        sock.send(b"%d" % pid)


request, fds = serve()

# the child: the test's streams, directory, environment and argv, then the Python as `python ARGV` runs it
sock.close()
for fd in status.values():
    os.close(fd)
if request.get("tty") or request.get("session"):  # a session of its own (start_new_session); with `tty`, the
    os.setsid()  # terminal (fd 0) its controlling terminal, as login_tty does
for target, fd in enumerate(fds[:3]):
    os.dup2(fd, target)
for fd in set(fds):
    if fd > 2:
        os.close(fd)
if request.get("tty"):
    import fcntl, termios
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
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
argv = request["argv"]
if argv[0] == "-m":  # python -m MODULE ARGS
    sys.path[0] = os.getcwd()
    sys.argv = ["-m", *argv[2:]]  # argv[0] becomes the path of the module's file, as `-m` makes it
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
else:  # python SCRIPT ARGS
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")
"""

# what may differ between the server's environment and a request's without a fresh interpreter: names read
# only after tuitrain's import (tuitrain's own), pytest's bookkeeping, the terminal's description (read by
# whoever draws, when it draws), the two that `import lightning` in a test process sets for good (torch reads
# them when it looks for CUDA or compiles, and the cache folder is set to the default torch would pick), and the
# one that torch.compile in a test process sets for good (an address in that process, which inductor sets anew
# before each compiled module it loads: the suite's in-process compile test sent every later CLI run of its
# worker to a fresh interpreter), and the one `import tensorboardX` sets for good (read by the crc32c package as
# it is imported, which the server never imports: it sent a worker's later runs to a server of their own); a
# request names more of its own (`runtime`), read by its own code as it runs
_RUNTIME_ONLY = (
    "TUITRAIN_",
    "PYTEST_",
    "TERM",
    "COLUMNS",
    "LINES",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "TORCHINDUCTOR_CACHE_DIR",
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
    "CRC32C_SW_MODE",
)

# PR_SET_CHILD_SUBREAPER / PR_GET_CHILD_SUBREAPER (linux/prctl.h)
_SET_SUBREAPER, _GET_SUBREAPER = 36, 37


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


def _signature(env: dict[str, str], runtime: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    """What of an environment the server's imports may have read: all but the names read only later."""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(_RUNTIME_ONLY + tuple(runtime))))


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

    def serves(self, env: dict[str, str], runtime: tuple[str, ...] = ()) -> bool:
        return self.proc.poll() is None and _signature(env, runtime) == _signature(self.env, runtime)

    def start(
        self,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        fds: tuple[int, int, int],
        tty: bool = False,
        adopt: bool = False,
        session: bool = False,
    ) -> tuple[int, int | None]:
        """Fork `python ARGV` with these standard streams (file descriptors, duplicated into it): (its pid, the
        read end of the pipe its exit status comes down). `tty`: a session of its own with fds[0], a terminal, as
        its controlling terminal. `adopt`: this process's own child (os.waitpid reaps it; no status pipe).
        `session`: a session and process group of its own (Popen's start_new_session)."""
        status_r, status_w = os.pipe()
        request = {"argv": argv, "cwd": str(cwd), "env": env, "tty": tty, "adopt": adopt, "session": session}
        msg = json.dumps(request).encode()
        try:
            with self.lock:
                before = _subreaper(True) if adopt else None
                try:
                    socket.send_fds(self.sock, [msg], [*fds, status_w])
                    pid = int(self.sock.recv(64))
                finally:
                    if before is not None:
                        _subreaper(before)
        finally:
            os.close(status_w)
        if adopt:
            os.close(status_r)
            return pid, None
        return pid, status_r

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _subreaper(on: bool) -> bool:
    """Make this process a child subreaper, or no longer one (Linux's prctl): the orphans of its descendants
    become its own children while it is one. Returns what it was."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    if libc.prctl(_GET_SUBREAPER, ctypes.byref(was), 0, 0, 0) != 0 or libc.prctl(_SET_SUBREAPER, int(on), 0, 0, 0):
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    return bool(was.value)


# by the test process's pid (one set per pytest-xdist worker): the servers, the newest used first, and how often
# each environment no server serves was asked for
_servers: dict[int, list[ForkServer]] = {}
_asked: dict[int, dict[tuple, int]] = {}
# servers a test process keeps at most (one for each environment asked for twice: a library the tests import
# may set a variable for good, and a test may run all its processes in an environment of its own)
MAX_SERVERS = 3


# the commands that import torch (the others start in a fraction of a second and never load it: they start fresh,
# so that what they find in sys.modules is what a user's finds); `sweep` imports it to check its parameters
TRAINS = {"run", "resume", "lr-find", "sweep"}


def server_for(env: dict[str, str], runtime: tuple[str, ...] = ()) -> ForkServer | None:
    """A fork server that can start a process with `env` (names in `runtime` read only by the process's own code
    as it runs), or None: a fresh process then. The first server starts on first use; a server for another
    environment on the second request for it (a request alone in its environment is cheaper fresh)."""
    if os.environ.get("TUITRAIN_TEST_FORK", "1") == "0":
        return None
    servers = _servers.setdefault(os.getpid(), [])
    servers[:] = [s for s in servers if s.proc.poll() is None]  # a server that died is started again when asked
    for server in servers:
        if server.serves(env, runtime):
            servers.remove(server)
            servers.insert(0, server)
            return server
    if servers:
        asked = _asked.setdefault(os.getpid(), {})
        key = _signature(env, runtime)
        asked[key] = asked.get(key, 0) + 1
        _note_refusal(env, servers[0].env, runtime)
        if asked[key] < 2 or len(servers) >= MAX_SERVERS:
            return None
    # the server's own environment without the request's `runtime` names (its child gets them with the rest of
    # the request's): a later request without them is served too
    server = ForkServer({k: v for k, v in env.items() if not k.startswith(tuple(runtime))})
    servers.insert(0, server)
    return server


def _note_refusal(env: dict[str, str], served: dict[str, str], runtime: tuple[str, ...]) -> None:
    """Under TUITRAIN_TEST_CPU=FILE, FILE.spawns gets the names in which a request's environment differs from
    the newest server's (what sends a test's processes to a fresh interpreter)."""
    path = os.environ.get("TUITRAIN_TEST_CPU", "")
    if path:
        ours, theirs = dict(_signature(env, runtime)), dict(_signature(served, runtime))
        names = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        with open(path + ".spawns", "a") as f:
            test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
            f.write(f"{test}\tforkserver: another environment: {' '.join(names)}\n")


def cpu_seconds() -> float:
    """The CPU time of this test process's fork servers and of the children they have reaped (Linux's /proc)."""
    total = 0.0
    for server in _servers.get(os.getpid(), []):
        if server.proc.poll() is not None:
            continue
        try:
            fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def close_servers() -> None:
    for server in _servers.pop(os.getpid(), []):
        server.close()


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess | None:
    """`subprocess.run(python -m tuitrain ARGS, capture_output=True, text=True)` through the fork server;
    None where it cannot serve this environment."""
    if not args or args[0] not in TRAINS:
        return None
    return run_python(["-m", "tuitrain", *args], cwd, env, timeout, args)


def run_python(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float, args: list[str] | None = None
) -> subprocess.CompletedProcess | None:
    """`subprocess.run([python, *ARGV], capture_output=True, text=True)` through the fork server, for a Python
    that imports torch; None where it cannot serve this environment. `args`: the result's args (ARGV's)."""
    args = argv if args is None else args
    server = server_for(env)
    if server is None:
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid, status = server.start(argv, cwd, env, (0, out_w, err_w))
    finally:
        os.close(out_w)
        os.close(err_w)
    assert status is not None
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
    server = server_for(env) if args and args[0] in TRAINS else None
    if server is None:
        return None
    pid, status = server.start(["-m", "tuitrain", *args], cwd, env, (0, output.fileno(), output.fileno()))
    assert status is not None
    return ForkedProcess(args, pid, status)


def popen(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    stdout: int | None = None,
    stderr: int | None = None,
    session: bool = False,
) -> ForkedProcess | None:
    """`subprocess.Popen([python, *ARGV], stdout=PIPE or None, stderr=PIPE, STDOUT or None, text=True,
    start_new_session=session)` through the fork server, for a Python that imports torch (`-m tuitrain run ...`,
    a user's training script); None where it cannot serve this environment. Its stdin is this process's; a stream
    not piped is this process's."""
    server = server_for(env)
    if server is None:
        return None
    mine: list[int] = []  # the write ends, closed here once the child has them
    out = err = None
    fds = [0, 1, 2]
    if stdout == subprocess.PIPE:
        out_r, fds[1] = os.pipe()
        mine.append(fds[1])
        out = os.fdopen(out_r, "r")
    if stderr == subprocess.PIPE:
        err_r, fds[2] = os.pipe()
        mine.append(fds[2])
        err = os.fdopen(err_r, "r")
    elif stderr == subprocess.STDOUT:
        fds[2] = fds[1]
    try:
        pid, status = server.start(argv, cwd, env, (fds[0], fds[1], fds[2]), session=session)
    finally:
        for fd in mine:
            os.close(fd)
    assert status is not None
    return ForkedProcess(["python", *argv], pid, status, out, err)


def in_pty(argv: list[str], cwd: Path, env: dict[str, str], runtime: tuple[str, ...] = ()) -> tuple[int, int] | None:
    """`pty.fork()` whose child runs `python ARGV` in `cwd` with `env`, through the fork server: (the child's
    pid, the terminal's master fd), as pty.fork gives them. The child is this process's own (os.waitpid and
    os.kill reach it), the leader of a session of its own whose controlling terminal is the pty, its stdin,
    stdout and stderr the pty's other end. None where it cannot serve this environment (or on a system without
    Linux's child subreapers)."""
    if not sys.platform.startswith("linux"):
        return None
    server = server_for(env, runtime)
    if server is None:
        return None
    master, slave = os.openpty()
    try:
        pid, _ = server.start(argv, cwd, env, (slave, slave, slave), tty=True, adopt=True)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return pid, master
