"""A sweep's trials started without importing torch again each time.

A fresh `python -m tuitrain run` spends about 5 of its first 5.5 CPU seconds importing torch and
torch._dynamo (which torch's Optimizer imports). The sweep starts one launcher for its life: a Python process
of its own, started with the trials' environment (OMP_NUM_THREADS included: libgomp reads it as torch is
imported), that imports torch and torch._dynamo once and then forks each trial. Imported alone, they start no
thread and no OpenMP pool, so the fork is safe. A forked trial is what a fresh `python -m tuitrain run ...`
is: its own process, in the sweep's process group (the launcher is the sweep's child and keeps its group), its
stdout and stderr the trial's .out file (passed over a Unix socket), stdin /dev/null, the signal dispositions
the sweep's children inherit, the random generators the interpreter seeds at start seeded afresh (torch's
default generator is untouched in the launcher: it starts at torch's fixed seed, as in a fresh process), and
it ends as an interpreter ends (threads joined, atexit, streams flushed). Its exit status comes to the sweep
down a pipe of its own, written when the launcher reaps it.

Death: the launcher is killed when the sweep's thread that started it ends (kill -9 of the sweep included);
each trial is sent SIGTERM when the launcher ends (as a trial started by the sweep itself is when the sweep
ends): it stops gracefully with a checkpoint. The launcher ignores the signals sent to the whole process
group (Ctrl+C, SIGTERM, a cluster's SIGUSR1): the sweep and the trials take them, as before.

A trial whose environment differs from the launcher's, a launcher that could not start or has ended, and
other systems than Linux: the trial starts as a fresh process, as before.

What differs from a fresh process: `ps` shows a forked trial with the launcher's command line; str hashes share
the launcher's seed; a warning torch gave as it was imported is not given again in each trial's .out file; the
objects the launcher's imports made are frozen (gc.freeze): a trial's garbage collections leave them out.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

#: what signal.getsignal returns
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

#: the signals a process group gets from a terminal or a cluster: the launcher ignores them, a trial has the
#: dispositions the launcher was started with
GROUP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2") if hasattr(signal, name)
)
_PDEATHSIG = 1  # prctl's PR_SET_PDEATHSIG (linux/prctl.h)
#: what the launcher imports once, for every trial: the seconds a `tuitrain run` spends before its first line
PRELOAD = ("torch", "torch._dynamo")


class LaunchedTrial:
    """The part of `subprocess.Popen` a sweep uses (`poll`, `wait`, `returncode`, `pid`), for a trial forked
    by the launcher: its exit status comes down the pipe `status_fd`."""

    def __init__(self, args: list[str], pid: int, status_fd: int) -> None:
        self.args, self.pid, self._status = args, pid, status_fd
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            return self.wait(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            text = os.read(self._status, 64)
            os.close(self._status)
            # an empty pipe: the launcher ended before the trial, which it sent SIGTERM, and the trial has ended
            self.returncode = int(text) if text.strip() else -signal.SIGTERM
        return self.returncode


class Launcher:
    """The sweep's side: starts the launcher process, asks it for trials, ends it."""

    def __init__(self, python: str, env: dict[str, str], preload: tuple[str, ...] = PRELOAD) -> None:
        from tuitrain.run.signals import die_with_parent

        self.env = dict(env)
        self.lock = threading.Lock()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [python, "-m", "tuitrain.run.trial_launcher", str(theirs.fileno()), str(os.getpid()), *preload],
                env=self.env,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent(signal.SIGKILL),
            )
        finally:
            theirs.close()
        self.sock = mine

    @staticmethod
    def available() -> bool:
        return sys.platform.startswith("linux") and hasattr(socket, "send_fds")

    def start(self, argv: list[str], env: dict[str, str], out_fd: int) -> LaunchedTrial | None:
        """`python ARGV` forked in the current folder, stdout and stderr to `out_fd`; None when the launcher
        cannot (another environment, the launcher gone): the caller starts a fresh process then."""
        if env != self.env or self.proc.poll() is not None:
            return None
        status_r, status_w = os.pipe()
        msg = json.dumps({"argv": argv, "cwd": os.getcwd()}).encode()
        try:
            with self.lock:
                try:
                    socket.send_fds(self.sock, [msg], [out_fd, status_w])
                    while not select.select([self.sock], [], [], 1.0)[0]:
                        if self.proc.poll() is not None:
                            break
                    reply = self.sock.recv(64) if self.proc.poll() is None else b""
                except OSError:
                    reply = b""
        finally:
            os.close(status_w)
        if not reply.strip():
            os.close(status_r)
            return None
        return LaunchedTrial(argv, int(reply), status_r)

    def close(self) -> None:
        """The launcher ends (a trial still running is sent SIGTERM) and is reaped."""
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- the launcher process ------------------------------------------------------------------------------


def _serve(sock: socket.socket, parent: int) -> tuple[dict, list[int], dict[int, Handler]] | None:
    """Requests read, trials forked, children reaped; returns in a forked child (its request, its fds and the
    signal dispositions to give it), None in the launcher when the sweep has gone."""
    inherited = {s: signal.getsignal(s) for s in GROUP_SIGNALS}
    for s in GROUP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    status: dict[int, int] = {}  # pid -> the write end of the pipe its exit status goes down
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    me = os.getpid()
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
                try:
                    os.write(fd, b"%d\n" % os.waitstatus_to_exitcode(st))
                except OSError:  # the sweep has gone
                    pass
                os.close(fd)
        if os.getppid() != parent:
            return None
        ready = select.select([sock.fileno(), wake_r], [], [], 1.0)[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        if sock.fileno() not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        if not msg:
            return None  # the sweep has closed it, or gone
        pid = os.fork()
        if pid == 0:
            prctl(_PDEATHSIG, signal.SIGTERM)  # dies with the launcher, as a trial with its sweep
            if os.getppid() != me:
                os._exit(128 + signal.SIGTERM)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w, *status.values()):
                os.close(fd)
            sock.close()
            return json.loads(msg), fds, inherited
        os.close(fds[0])
        status[pid] = fds[1]
        sock.send(b"%d" % pid)


def _main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    parent = int(sys.argv[2])
    if os.getppid() != parent:  # the sweep ended as it started this
        return
    for name in sys.argv[3:]:
        importlib.import_module(name)
    # what the imports made is never garbage: frozen (gc.freeze, as Python's documentation has it for a process
    # that forks without exec), it is left out of each trial's garbage collections, its interpreter's end's
    # above all (~1.1 CPU s a trial walking torch's objects, and writing to the pages it shares with the
    # launcher; ~0.4 frozen)
    gc.collect()
    gc.freeze()
    got = _serve(sock, parent)
    if got is None:
        return
    request, (out_fd, status_fd), inherited = got
    # the trial holds the write end of its status pipe (closed by the kernel as it ends, not passed on to a
    # program it runs): the sweep sees it end even when the launcher has gone first
    os.set_inheritable(status_fd, False)
    # the child: the trial's streams, folder, signals and generators, then `python -m tuitrain ...` as -m runs it
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    for s, handler in inherited.items():
        if handler is not None:  # (None: set outside Python; the launcher's SIG_IGN stays)
            signal.signal(s, handler)
    os.chdir(request["cwd"])
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    import runpy

    argv = request["argv"]
    assert argv[0] == "-m", argv  # python -m MODULE ARGS
    sys.path[0] = os.getcwd()
    sys.argv = ["-m", *argv[2:]]  # argv[0] becomes the path of the module's file, as `-m` makes it
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main()
