"""Faults users meet, injected: a run directory that cannot be written (a full disk), an out-of-memory
step, a dashboard that crashes, a terminal that goes away. Each ends with one plain line, a run.json
that says what happened, and checkpoints that all load."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tuitrain
from tuitrain.core.checkpoint import load_checkpoint, read_index
from tuitrain.sinks.metric_files import MetricFileLogger

from tests.conftest import STEPS_PER_EPOCH, read_events


def _data(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _learner(run_dir, epochs=6, model=None):
    torch.manual_seed(0)
    model = model or nn.Linear(4, 2)
    return tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        batch_size=8,
        epochs=epochs,
        run_dir=run_dir,
        log_every_n_steps=1,
    )


def _every_checkpoint_loads(run_dir: Path) -> list[str]:
    folder = run_dir / "checkpoint"
    files = [e.file for e in read_index(folder)]
    for name in files:
        load_checkpoint(folder / name)  # raises on a damaged or partial file
    return files


def test_a_sink_that_hits_a_full_disk_stops_the_run_at_the_next_step_with_one_line(tmp_path, monkeypatch, capfd):
    run_dir = tmp_path / "run"
    real = MetricFileLogger.__call__
    calls = {"n": 0}

    def fills_up(self, event, state=None):
        calls["n"] += 1
        if calls["n"] > 40:  # the disk is full from here on
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, event, state)

    monkeypatch.setattr(MetricFileLogger, "__call__", fills_up)
    result = _learner(run_dir, epochs=50).fit(_data(), _data(16), dashboard="auto")
    out, err = capfd.readouterr()
    assert result.status == "failed" and result.exit_code == 1
    assert "No space left on device (the disk is full)" in result.error and str(run_dir) in result.error
    # stopped at a step boundary soon after, not 50 epochs later
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and info["reason"] == "write_failed" and info["exit_code"] == 1
    assert info["epoch"] < 50 and "No space left on device" in info["error"]
    # one line on stderr, naming the cause and the last complete checkpoint; no traceback anywhere
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    files = _every_checkpoint_loads(run_dir)
    assert files and f"last complete checkpoint: {run_dir / 'checkpoint' / files[-1]}" in errors[0]
    assert "Traceback" not in out + err and "callback" not in err
    # the traceback is kept where it can still be written
    assert "OSError: [Errno 28]" in (run_dir / "experiment.log").read_text()
    failed = [e for e in read_events(run_dir) if e["event"] == "RunFailed"]
    assert failed[0]["cause"] == "write_failed" and failed[0]["checkpoint"].endswith(files[-1])


def test_a_final_checkpoint_that_cannot_be_written_fails_the_run(tmp_path, capfd):
    run_dir = tmp_path / "run"
    learner = _learner(run_dir, epochs=2)
    real = learner.checkpointer.save_fn

    def full_at_the_end(obj, f):
        if obj["epoch"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(obj, f)

    learner.checkpointer.save_fn = full_at_the_end
    result = learner.fit(_data(), dashboard="auto")
    err = capfd.readouterr().err
    assert result.status == "failed" and result.exit_code == 1
    assert result.error.startswith("the final checkpoint: cannot write ") and "disk is full" in result.error
    assert json.loads((run_dir / "run.json").read_text())["reason"] == "write_failed"
    assert _every_checkpoint_loads(run_dir) == ["epoch-0001-step-00000008.pt"]
    assert "last complete checkpoint: " + str(run_dir / "checkpoint" / "epoch-0001-step-00000008.pt") in err


def test_run_json_gets_its_final_status_on_a_disk_with_no_room_for_a_new_file(tmp_path, monkeypatch):
    from tuitrain.core import fsutil
    from tuitrain.core.events import RunFailed, RunStarted
    from tuitrain.sinks import run_status

    writer = run_status.RunStatusWriter(tmp_path)
    writer(
        RunStarted(
            run_dir=str(tmp_path),
            experiment="x",
            epochs=1,
            max_steps=0,
            steps_per_epoch=1,
            batch_size=1,
            pid=os.getpid(),
        )
    )

    def no_room(path, obj):  # a temporary file cannot be written any more
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_status, "atomic_write_json", no_room)
    writer(
        RunFailed(error="cannot write x: No space left on device", traceback="", epoch=1, step=3, cause="write_failed")
    )
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "failed" and info["reason"] == "write_failed" and info["step"] == 3
    assert fsutil.WRITE_FAULTS[errno.ENOSPC] == "the disk is full"


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return r.returncode == 0


def test_a_real_full_disk_under_the_cli_ends_in_one_line_and_a_failed_run(tiny, tmp_path):
    disk = tmp_path / "disk"
    # 1 MB: full at about epoch 30 (each epoch's metric files take a few blocks), where 3 MB took 100 epochs to fill
    if not _mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        cfg = tiny.write_config(
            "full.toml",
            tiny.config_text()
            .replace(f'dir = "{tiny.runs.as_posix()}"', f'dir = "{disk.as_posix()}"')
            .replace("epochs = 3", "epochs = 1000")
            .replace("hidden = 16", "hidden = 512"),
        )
        r = tiny.cli("run", cfg, "--headless")
        assert r.returncode == 1, r.stderr[-2000:]
        assert "Traceback" not in r.stdout + r.stderr
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "No space left on device (the disk is full)" in errors[0], r.stderr[-2000:]
        (run_dir,) = (disk / "tiny").iterdir()
        info = json.loads((run_dir / "run.json").read_text())
        assert info["status"] == "failed" and info["reason"] == "write_failed", info
        files = _every_checkpoint_loads(run_dir)
        assert files and f"last complete checkpoint: {run_dir / 'checkpoint' / files[-1]}" in errors[0]
        ls = tiny.cli("ls", disk / "tiny")
        assert " failed " in ls.stdout, ls.stdout
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_out_of_memory_in_a_step_names_the_batch_size_and_the_keys_to_change(tiny):
    cfg = tiny.write_config(
        "oom.toml",
        tiny.config_text()
        .replace('target = "tinyproj:Net"', 'target = "tinyproj:Net"\nfail_at_step = 10')
        .replace("[data]", "[data]"),
    )
    (tiny.root / "tinyproj.py").write_text(
        (tiny.root / "tinyproj.py")
        .read_text()
        .replace(
            'raise RuntimeError(f"tinyproj exploded on purpose at call {self.train_calls}")', "raise MemoryError()"
        )
    )
    r = tiny.cli("run", cfg, "--headless")
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    line = errors[0]
    assert "out of memory in a train step with batch size 16 on cpu (MemoryError)" in line
    assert "lower data.batch_size, and raise train.grad_accumulation" in line
    (run_dir,) = tiny.run_dirs()
    files = _every_checkpoint_loads(run_dir)
    assert files == [f"epoch-0001-step-{STEPS_PER_EPOCH:08d}.pt"]
    assert f"last complete checkpoint: {run_dir / 'checkpoint' / files[0]}" in line
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and info["reason"] == "out_of_memory"
    assert "Traceback" in (run_dir / "experiment.log").read_text()


# --- the terminal under the dashboard ---------------------------------------------------------------

LOUD = '''
from tinyproj import Net


class Loud(Net):
    """Prints now and then, as users' models do."""

    def forward(self, x):
        out = super().forward(x)
        if self.training and self.train_calls % 10 == 0:
            print(f"loud call {self.train_calls}", flush=True)
        return out
'''

BROKEN_SCREEN = """
import tuitrain.dashboard.app as _app

_drain = _app.DashboardApp.drain


def drain(self, *args, **kwargs):
    if self.state.step >= 40:  # mid-run: a widget fails on what it is given
        raise ZeroDivisionError("injected screen failure")
    return _drain(self, *args, **kwargs)


_app.DashboardApp.drain = drain
"""


def _dashboard_run(tiny, run_dir, epochs: int, env_extra: dict | None = None):
    """`tuitrain run` under the dashboard in a pseudo-terminal: (pid, the pty's fd)."""
    import pty

    from tests.conftest import cli_env

    (tiny.root / "loudproj.py").write_text(LOUD)
    cmd = [
        sys.executable,
        "-m",
        "tuitrain",
        "run",
        str(tiny.config),
        "--run-dir",
        str(run_dir),
        "--set",
        f"train.epochs={epochs}",
        "--set",
        "model.sleep=0.01",
        "--set",
        "model.target=loudproj:Loud",
        "--set",
        "checkpoint.every_n_epochs=5",
    ]
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="100", LINES="30", **(env_extra or {}))
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(tiny.root)
        os.execvpe(cmd[0], cmd, env)
    return pid, fd


def _wait_exit(pid: int, fd: int | None, timeout: float = 300) -> tuple[int | None, bytes]:
    import time

    from tests.conftest import read_pty

    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        out += read_pty(fd, 0.1) if fd is not None else b""
        if fd is None:
            time.sleep(0.1)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), out + (read_pty(fd, 0.2) if fd is not None else b"")
    return None, out


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _until_training(fd: int, run_dir: Path, steps: int = 3) -> bytes:
    from tests.conftest import read_pty, wait_for

    screen = b""

    def trained():
        nonlocal screen
        screen += read_pty(fd, 0.1)
        try:
            return json.loads((run_dir / "run.json").read_text()).get("step", 0) >= steps
        except (OSError, ValueError):
            return False

    wait_for(trained, what="training under the dashboard")
    return screen


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_a_closed_terminal_leaves_training_to_go_on_detached_to_its_end(tiny):
    from tuitrain.sinks.run_status import live_status

    run_dir = tiny.root / "run"
    pid, fd = _dashboard_run(tiny, run_dir, epochs=60)
    try:
        screen = _until_training(fd, run_dir)
        assert b"\x1b[" in screen  # the dashboard, not plain lines
        os.close(fd)  # what a dropped SSH connection or a closed terminal window does: SIGHUP
        fd = None
        # the process lives on, training, and its run directory says so (tuitrain watch attaches to it)
        at_hangup = json.loads((run_dir / "run.json").read_text())["step"]
        code, _ = _wait_exit(pid, None)
        assert code == 0, "the run ends with its own exit code once training is done"
    finally:
        if fd is not None:
            os.close(fd)
        _kill(pid)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["step"] == 60 * STEPS_PER_EPOCH > at_hangup
    assert live_status(run_dir) == "completed"
    log = (run_dir / "experiment.log").read_text()
    assert "the terminal closed: training goes on detached" in log
    after = log.split("the terminal closed", 1)[1]
    # what the model printed after the terminal went away is in experiment.log
    assert "loud call 420" in after  # its last print (60 epochs of 7 steps)
    files = _every_checkpoint_loads(run_dir)
    assert files[-1] == f"epoch-0060-step-{60 * STEPS_PER_EPOCH:08d}.pt"


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_a_failing_screen_leaves_training_to_finish_with_console_lines(tiny):
    inject = tiny.root / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(BROKEN_SCREEN)
    run_dir = tiny.root / "run"
    pid, fd = _dashboard_run(tiny, run_dir, epochs=40, env_extra={"PYTHONPATH": str(inject)})
    try:
        code, out = _wait_exit(pid, fd)
        assert code == 0, out[-3000:]
    finally:
        os.close(fd)
        _kill(pid)
    text = out.decode(errors="replace")
    assert "tuitrain: the dashboard failed (ZeroDivisionError: injected screen failure); training goes on" in text
    assert "training completed: all 40 epochs done" in text  # console lines after the screen went
    assert "Traceback" not in text  # it is in experiment.log
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["exit_code"] == 0
    log = (run_dir / "experiment.log").read_text()
    assert "the dashboard failed (ZeroDivisionError" in log and "raise ZeroDivisionError" in log


# --- values a screen cannot draw ------------------------------------------------------------------


def test_nan_inf_negative_and_enormous_values_are_drawn_without_an_error():
    import asyncio

    from tuitrain.core.events import EpochCompleted, EpochStarted, MetricsLogged, RunStarted
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.sources.run_files import ReplaySource

    values = [1.0, float("nan"), float("inf"), -float("inf"), -3.5, 1e300, 0.0, 2.5e-7, -1e-300, 0.5]
    events = [
        RunStarted(
            run_dir="",
            experiment="odd",
            epochs=2,
            max_steps=0,
            steps_per_epoch=len(values),
            batch_size=4,
            pid=os.getpid(),
        ),
        EpochStarted(epoch=1, epochs=2, step=0),
    ]
    for i, v in enumerate(values, 1):
        events.append(
            MetricsLogged(
                split="train",
                epoch=1,
                step=i,
                metrics={"loss": v, "odd": -v},
                scope="step",
                batch=i,
                batches=len(values),
            )
        )
    events.append(
        EpochCompleted(
            epoch=1,
            epochs=2,
            step=len(values),
            metrics={"valid/loss": float("nan"), "train/loss": float("inf")},
            duration=1.0,
        )
    )

    async def body():
        app = DashboardApp(ReplaySource(events), None)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            for key in ("tab", "l", "s", "w", "tab", "l", "enter", "enter"):  # every chart, every way
                await pilot.press(key)
                await pilot.pause()
            assert app.is_running and app.return_code is None
            app.exit()

    asyncio.run(body())
