"""The dashboard in a real pseudo-terminal: a signal stops training gracefully, the process leaves
with 130 and the terminal is left as it was found."""

from __future__ import annotations

import json
import os
import signal
import sys
import termios
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")


def test_sigterm_under_the_dashboard_stops_gracefully_and_restores_the_terminal(tiny):
    from tests.conftest import cli_env, python_in_pty, read_pty, wait_exit

    run_dir = tiny.root / "run"
    cmd = [
        sys.executable,
        "-m",
        "tuitrain",
        "run",
        str(tiny.config),
        "--run-dir",
        str(run_dir),
        "--set",
        "train.epochs=200",
        "--set",
        "model.sleep=0.01",
    ]
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="100", LINES="30")
    pid, fd = python_in_pty(cmd[1:], tiny.root, env)
    before = termios.tcgetattr(fd)
    try:
        deadline = time.time() + 60
        screen = b""
        while time.time() < deadline:  # until it trains, with the dashboard on screen
            screen += read_pty(fd, 0.2)
            info = run_dir / "run.json"
            if info.exists() and json.loads(info.read_text() or "{}").get("step", 0) >= 3:
                break
        assert b"\x1b[" in screen  # a full-screen app, not plain lines
        os.kill(pid, signal.SIGTERM)
        code, _ = wait_exit(pid, fd, 30)
        assert code == 130, "the dashboard must leave by itself after a signal's graceful stop"
        after = termios.tcgetattr(fd)
        assert after[3] & termios.ICANON and after[3] & termios.ECHO  # cooked mode is back
        assert after[3] == before[3]
        info = json.loads((run_dir / "run.json").read_text())
        assert info["status"] == "interrupted" and info["exit_code"] == 130
        index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
        assert index and index[-1]["step"] == info["step"]
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
