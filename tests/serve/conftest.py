"""`tuitrain serve` as a user starts it: the real command in a subprocess on a free 127.0.0.1 port,
its one printed URL read back, and the viewer processes it runs found among its children."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import cli_env

URL = re.compile(r"http://127\.0\.0\.1:(\d+)/([A-Za-z0-9_-]+)/")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A running `tuitrain serve`: its process, the URL it printed, the token in it."""

    def __init__(self, proc: subprocess.Popen, out: Path, url: str, port: int, token: str) -> None:
        self.proc, self.out, self.url, self.port, self.token = proc, out, url, port, token
        self.base = f"http://127.0.0.1:{port}"

    def ws_url(self, token: str | None = None, width: int = 120, height: int = 40) -> str:
        return f"ws://127.0.0.1:{self.port}/{token or self.token}/ws?width={width}&height={height}"

    def viewers(self) -> list[int]:
        """The pids of the viewer processes (one per open connection) this server runs now."""
        import psutil

        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                cmd = child.cmdline()
            except psutil.Error:
                continue
            if cmd[1:3] == ["-m", "tuitrain.dashboard.serve"]:  # the viewer itself, not `sh -c` around it
                found.append(child.pid)
        return found

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_serve(cwd: Path, *args, timeout: float = 30) -> Served:
    port = free_port()
    out = cwd / f"serve-{port}.out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "serve", *map(str, args), "--port", str(port)],
        cwd=cwd,
        env=cli_env(),
        stdout=open(out, "w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = URL.search(out.read_text())
        if m:
            return Served(proc, out, m.group(0), int(m.group(1)), m.group(2))
        if proc.poll() is not None:
            pytest.fail(f"tuitrain serve ended with {proc.returncode}:\n{out.read_text()}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    pytest.fail(f"tuitrain serve printed no URL within {timeout:.0f} s:\n{out.read_text()}")


@pytest.fixture
def serve():
    """start_serve(cwd, RUN_DIR..., *options); every server started is stopped after the test."""
    started: list[Served] = []

    def start(cwd: Path, *args) -> Served:
        s = start_serve(cwd, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def finished_run(make_tiny):
    """A finished tiny run, trained once for these tests: (project, run directory)."""
    tiny = make_tiny("served")
    run = tiny.root / "served-run"
    r = tiny.cli("run", tiny.config, "--headless", "--run-dir", run, "--set", "train.epochs=1")
    assert r.returncode == 0, r.stderr
    return tiny, run


def screen_text(raw: bytes) -> str:
    """What a terminal stream shows, roughly: escape sequences dropped, the text kept."""
    text = raw.decode("utf-8", "replace")
    return re.sub(r"\x1b(\[[0-9;?<>=$ ]*[A-Za-z~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Za-z0-9]|[=>78])", "", text)
