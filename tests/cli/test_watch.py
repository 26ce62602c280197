"""`tuitrain watch RUN_DIR` from the command line, in a real pseudo-terminal, on a live headless run:
the dashboard follows the run; `q` asks, `l` leaves the viewer, and the run goes on."""

from __future__ import annotations

import os
import pty
import signal
import sys

import pytest

from tests.conftest import cli_env, read_pty

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")


def test_watch_follows_a_live_run_and_q_then_l_leaves_it_running(tiny):
    run = tiny.root / "run"
    proc = tiny.cli_bg(
        "run", tiny.config, "--headless", "--run-dir", run, "--set", "model.sleep=0.02", "--set", "train.epochs=2000"
    )  # ends long after the test
    pid = fd = None
    try:
        tiny.wait_for(lambda: tiny.last_train_step(run) >= 2, what="the run to train")
        env = dict(cli_env(), TERM="xterm-256color", COLUMNS="120", LINES="36")
        cmd = [sys.executable, "-m", "tuitrain", "watch", str(run)]
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(tiny.root)
            os.execvpe(cmd[0], cmd, env)
        screen = b""

        def shows(text: bytes) -> bool:
            nonlocal screen
            screen += read_pty(fd, 0.1)
            return text in screen

        tiny.wait_for(lambda: shows("[watching · live]".encode()), timeout=120, what="the dashboard of the live run")
        os.write(fd, b"q")
        tiny.wait_for(lambda: shows(b"Stop training and leave?"), timeout=30, what="the question q asks")
        os.write(fd, b"l")

        def exited():
            nonlocal screen
            screen += read_pty(fd, 0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
            return done and (os.waitstatus_to_exitcode(status),)

        (code,) = tiny.wait_for(exited, timeout=60, what="the viewer to leave")
        pid = None
        assert code == 0
        # the run was only watched: it trains on, and nothing asked it to stop
        left_at = tiny.last_train_step(run)
        tiny.wait_for(
            lambda: tiny.last_train_step(run) > left_at + 2, timeout=60, what="training after the viewer left"
        )
        assert proc.poll() is None
        assert not [e for e in tiny.read_events(run, torn_ok=True) if e["event"] == "ControlReceived"]
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if fd is not None:
            os.close(fd)
        proc.kill()
        proc.wait()
