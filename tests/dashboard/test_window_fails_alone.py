"""The window fails alone (issue 50): `tuitrain run` in a real pseudo-terminal, its dashboard broken by
an exception injected into a widget (the progress panel fails on its Nth update, as a bug in a widget
would), or closed by keys typed fast. Training goes on with the headless lines, and every way to stop
works as it did under the screen: Ctrl+C (a graceful stop: the stop checkpoint, run.json `interrupted`,
exit 130), a second Ctrl+C (training ends now, run.json still says so), SIGTERM, SIGHUP (the run goes
on detached to its own end), `tuitrain stop`. No exit leaves C++'s `terminate` (exit 134) or run.json
`running`.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")

#: `tuitrain run` with a widget that fails: what a bug in a widget does to the screen
FAILING = """
import os, sys
from tuitrain.dashboard.panels import progress_panel

after = int(os.environ.get("FAIL_AFTER", "0"))
show, shown = progress_panel.ProgressPanel.show, [0]

def failing(self, *args, **kwargs):
    shown[0] += 1
    if after and shown[0] == after:
        raise RuntimeError("a widget failed on purpose")
    return show(self, *args, **kwargs)

progress_panel.ProgressPanel.show = failing
from tuitrain.cli import main
sys.exit(main(sys.argv[1:]))
"""


def start(tiny, fail_after: int, *extra: str) -> tuple[int, int, Path]:
    from tests.conftest import cli_env, python_in_pty

    (tiny.root / "failing.py").write_text(FAILING)
    run_dir = tiny.root / "run"
    cmd = [
        sys.executable,
        str(tiny.root / "failing.py"),
        "run",
        str(tiny.config),
        "--run-dir",
        str(run_dir),
        "--set",
        "train.epochs=400",
        "--set",
        "model.sleep=0.005",
        *extra,
    ]
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="100", LINES="30", FAIL_AFTER=str(fail_after))
    pid, fd = python_in_pty(cmd[1:], tiny.root, env, runtime=("FAIL_AFTER",))
    return pid, fd, run_dir


def info(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run.json").read_text() or "{}")
    except (OSError, ValueError):
        return {}


def until(fd: int, condition, timeout: float = 60) -> bytes:
    from tests.conftest import read_pty

    screen = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        screen += read_pty(fd, 0.1)
        if condition(screen):
            return screen
    raise AssertionError(f"not in time; the terminal's last bytes: {screen[-2000:]!r}")


def failed_and_training_on(fd: int, run_dir: Path) -> bytes:
    """The screen failed (one line says so) and training goes on, its lines on the terminal."""
    screen = until(fd, lambda s: b"the dashboard failed" in s)
    step = info(run_dir).get("step", 0)
    screen += until(fd, lambda s: info(run_dir).get("step", 0) > step + 5)
    return screen


def end(pid: int, fd: int, timeout: float = 60) -> tuple[int | None, bytes]:
    from tests.conftest import wait_exit

    try:
        return wait_exit(pid, fd, timeout)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def stopped_gracefully(run_dir: Path) -> None:
    status = info(run_dir)
    assert status["status"] == "interrupted" and status["exit_code"] == 130, status
    index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
    assert index[-1]["step"] == status["step"], (index[-1], status)  # the stop's own checkpoint
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    last = [e for e in events if e["event"] in ("RunFinished", "RunFailed")][-1]  # (a device sample may follow)
    assert last["event"] == "RunFinished" and last["status"] == "interrupted"


@pytest.mark.parametrize("how", ["ctrl+c", "sigterm", "stop command"])
def test_after_the_screen_failed_a_stop_is_graceful(tiny, how):
    pid, fd, run_dir = start(tiny, fail_after=3)
    try:
        screen = failed_and_training_on(fd, run_dir)
        assert b"training goes on without it" in screen
        if how == "ctrl+c":
            os.write(fd, b"\x03")  # the terminal is back in its own mode: Ctrl+C is SIGINT now
        elif how == "sigterm":
            os.kill(pid, signal.SIGTERM)
        else:
            assert tiny.cli("stop", run_dir).returncode == 0
    except BaseException:
        end(pid, fd, 1)
        raise
    code, screen = end(pid, fd)
    assert code == 130, screen[-2000:]
    assert b"terminate called" not in screen
    stopped_gracefully(run_dir)


def test_after_the_screen_failed_a_second_ctrl_c_ends_training_and_says_so(tiny):
    # steps of half a second: the second Ctrl+C comes while the graceful stop still waits for its step
    pid, fd, run_dir = start(tiny, 3, "--set", "model.sleep=0.5")
    try:
        failed_and_training_on(fd, run_dir)
        os.write(fd, b"\x03")
        until(fd, lambda s: b"Ctrl+C again ends it now" in s)
        os.write(fd, b"\x03")
    except BaseException:
        end(pid, fd, 1)
        raise
    code, screen = end(pid, fd, 30)
    # 130; or killed by the SIGINT itself (-2; a shell's $? is 130 all the same) when it came as the
    # interpreter was already on its way out, past every handler, the run's files written
    assert code in (130, -2), screen[-2000:]
    assert b"terminate called" not in screen
    status = info(run_dir)
    assert status["status"] == "interrupted" and status["exit_code"] == 130, status


@pytest.mark.slow
def test_after_the_screen_failed_sighup_goes_on_detached_to_the_end(tiny):
    pid, fd, run_dir = start(tiny, 3, "--set", "train.epochs=12")
    try:
        failed_and_training_on(fd, run_dir)
        os.kill(pid, signal.SIGHUP)  # the terminal closed
    except BaseException:
        end(pid, fd, 1)
        raise
    code, _ = end(pid, fd, 120)
    assert code == 0
    assert info(run_dir)["status"] == "completed"


def test_q_n_n_typed_fast_then_ctrl_c_stops_with_the_checkpoint(tiny):
    """The issue's two keystrokes: `q`, then `n` `n` in one read (the dialog answered twice), then Ctrl+C:
    the dashboard is still up, and Ctrl+C stops gracefully from it."""
    pid, fd, run_dir = start(tiny, fail_after=0)
    try:
        until(fd, lambda s: info(run_dir).get("step", 0) >= 5)
        os.write(fd, b"q")
        time.sleep(0.5)
        os.write(fd, b"nn")
        time.sleep(1.0)
        os.write(fd, b"\x03")
    except BaseException:
        end(pid, fd, 1)
        raise
    code, screen = end(pid, fd)
    assert b"the dashboard failed" not in screen
    assert code == 130, screen[-2000:]
    stopped_gracefully(run_dir)


#: a user's loop under `Monitor`: its dashboard is `tuitrain watch --owned` in a process of its own
MONITOR_LOOP = """
import sys, time
from tuitrain import Monitor

with Monitor(experiment="loop", run_dir=sys.argv[1], max_steps=100000) as mon:
    for step in range(1, 100001):
        time.sleep(0.005)
        mon.log(step, loss=1.0 / step)
        if mon.checkpoint_requested:
            mon.save_checkpoint({"step": step})
        if mon.stop_requested:
            mon.save_checkpoint({"step": step})
            break
"""

#: imported by every Python process started with this folder on PYTHONPATH: the viewer's widget fails
SITECUSTOMIZE = """
import os
if os.environ.get("FAIL_AFTER"):
    from tuitrain.dashboard.panels import progress_panel

    show, shown = progress_panel.ProgressPanel.show, [0]

    def failing(self, *args, **kwargs):
        shown[0] += 1
        if shown[0] == int(os.environ["FAIL_AFTER"]):
            raise RuntimeError("a widget failed on purpose")
        return show(self, *args, **kwargs)

    progress_panel.ProgressPanel.show = failing
"""


def test_a_monitors_dashboard_that_fails_leaves_the_loop_its_lines_and_ctrl_c(tmp_path):
    """The viewer process fails: the user's loop goes on, the headless lines on the terminal from then on,
    and Ctrl+C still stops the loop through `stop_requested` (run.json interrupted, the loop's own exit)."""
    from tests.conftest import cli_env

    (tmp_path / "loop.py").write_text(MONITOR_LOOP)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    run_dir = tmp_path / "run"
    env = dict(
        cli_env(),
        TERM="xterm-256color",
        COLUMNS="100",
        LINES="30",
        FAIL_AFTER="3",
        PYTHONPATH=os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(tmp_path)
        os.execvpe(sys.executable, [sys.executable, str(tmp_path / "loop.py"), str(run_dir)], env)
    try:
        until(fd, lambda s: b"the dashboard failed" in s, 120)
        step = info(run_dir).get("step", 0)
        screen = until(fd, lambda s: b"training goes on without it" in s and info(run_dir).get("step", 0) > step + 20)
        assert b"Traceback" not in screen
        time.sleep(1.5)  # a headless line or two
        os.write(fd, b"\x03")
    except BaseException:
        end(pid, fd, 1)
        raise
    code, screen = end(pid, fd)
    assert code == 0, screen[-2000:]  # the loop broke out of itself and its `with` block ended
    status = info(run_dir)
    assert status["status"] == "interrupted", status


def test_a_watch_whose_screen_fails_exits_1_with_one_line(tmp_path):
    """`tuitrain watch RUN_DIR` whose widget fails: exit 1, one line naming the error and the file of its
    traceback, no traceback over the terminal."""
    from tests.conftest import cli_env
    from tests.dashboard.fixtures import recorded_run, write_jsonl

    write_jsonl(tmp_path / "run" / "events.jsonl", recorded_run(epochs=2, end="completed"))
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(
        cli_env(),
        TERM="xterm-256color",
        COLUMNS="100",
        LINES="30",
        FAIL_AFTER="2",
        PYTHONPATH=os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(sys.executable, [sys.executable, "-m", "tuitrain", "watch", str(tmp_path / "run")], env)
    code, screen = end(pid, fd, 120)
    assert code == 1, screen[-2000:]
    text = screen.decode(errors="replace")
    assert "tuitrain: the dashboard failed (RuntimeError: a widget failed on purpose); the traceback is in " in text
    assert "Traceback" not in text
    path = text.split("the traceback is in ")[1].split()[0]
    assert "a widget failed on purpose" in Path(path).read_text()
