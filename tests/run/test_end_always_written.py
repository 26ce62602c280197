"""The end is always written (issue 50): whatever way the process ends short of kill -9, run.json and
events.jsonl say how the run ended. Ways from the user's side: an exception in a callback (the run goes
on: the log names the callback), `sys.exit` from the user's code (failed, SystemExit named), a sink that
fails on every write (the run goes on, said once), the dashboard failing while it shows the summary
(the run completed: it stays so, exit 0)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain import Learner


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 2, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


class Net(nn.Module):
    def __init__(self, exit_at: int = 0):
        super().__init__()
        self.fc, self.calls, self.exit_at = nn.Linear(2, 2), 0, exit_at

    def forward(self, x):
        self.calls += 1
        if self.calls == self.exit_at:
            sys.exit(3)  # the user's code ends the program
        return self.fc(x)


def fit(run_dir: Path, model: Net, callbacks=()):
    learner = Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=2,
        batch_size=32,
        run_dir=run_dir,
        callbacks=list(callbacks),
    )
    return learner.fit(data(), dashboard=False)


def ended(run_dir: Path) -> tuple[dict, dict]:
    status = json.loads((run_dir / "run.json").read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    last = [e for e in events if e["event"] in ("RunFinished", "RunFailed")][-1]  # (a device sample may follow)
    return status, last


def test_an_exception_in_a_callback_is_said_and_the_run_ends_as_it_would(tmp_path):
    def callback(event, state):
        if event.name == "EpochCompleted":
            raise RuntimeError("my callback broke")

    result = fit(tmp_path / "run", Net(), [callback])
    status, last = ended(tmp_path / "run")
    assert result.status == status["status"] == last["status"] == "completed"
    assert last["event"] == "RunFinished"
    log = (tmp_path / "run" / "experiment.log").read_text()
    assert "callback_is_said_and_the_run_ends_as_it_would.<locals>.callback failed on EpochCompleted" in log
    assert "my callback broke" in log


def test_sys_exit_in_the_users_code_ends_the_run_failed_and_says_why(tmp_path):
    result = fit(tmp_path / "run", Net(exit_at=4))
    status, last = ended(tmp_path / "run")
    assert result.status == status["status"] == "failed" and status["exit_code"] == 1
    assert last["event"] == "RunFailed" and last["error"] == "SystemExit: 3"


def test_a_sink_that_fails_every_write_leaves_the_run_and_its_files_whole(tmp_path):
    calls = []

    def sink(event, state):
        calls.append(event.name)
        raise OSError(28, "No space left on device", "/mnt/full/metrics.csv")

    result = fit(tmp_path / "run", Net(), [sink])
    status, last = ended(tmp_path / "run")
    assert result.status == status["status"] == last["status"] == "completed"
    assert len(calls) > 5  # still called: a sink may come back
    log = (tmp_path / "run" / "experiment.log").read_text()
    assert log.count(".sink failed on ") == 1 and "No space left on device" in log  # said once


FAILING_SUMMARY = """
import sys
from tuitrain.dashboard.screens import result_screen

def compose(self):
    raise RuntimeError("the summary failed on purpose")
    yield

result_screen.ResultScreen.compose = compose
from tuitrain.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_the_dashboard_failing_on_the_summary_leaves_the_run_completed(tiny):
    from tests.conftest import cli_env, python_in_pty, wait_exit

    (tiny.root / "failing.py").write_text(FAILING_SUMMARY)
    run_dir = tiny.root / "run"
    cmd = [
        sys.executable,
        str(tiny.root / "failing.py"),
        "run",
        str(tiny.config),
        "--run-dir",
        str(run_dir),
        "--set",
        "train.epochs=2",
    ]
    pid, fd = python_in_pty(cmd[1:], tiny.root, dict(cli_env(), TERM="xterm-256color", COLUMNS="100", LINES="30"))
    try:
        code, screen = wait_exit(pid, fd, 120)
    finally:
        os.close(fd)
    assert code == 0, screen[-2000:]
    assert b"the dashboard failed (RuntimeError: the summary failed on purpose) after the run ended" in screen
    assert b"Training completed" in screen  # the summary it could not show
    assert b"Traceback" not in screen
    status, last = ended(run_dir)
    assert status["status"] == "completed" and status["exit_code"] == 0 and last["event"] == "RunFinished"
