"""`tuitrain.Learner` from a script: what fit shows (dashboard, console lines, nothing), and a run
directory that obeys `tuitrain stop` / `tuitrain checkpoint` and is named after its folder."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tuitrain
from tests.conftest import cli_env, python_in_pty, python_popen, read_events, read_pty, wait_for, wait_exit


def _data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _learner(**kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return tuitrain.Learner(
        model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.CrossEntropyLoss(), batch_size=16, **kw
    )


def test_fit_without_a_terminal_prints_the_headless_console_lines(capsys, tmp_path):
    result = _learner(epochs=2, run_dir=tmp_path / "run").fit(_data(), _data(seed=1))
    out = capsys.readouterr().out
    assert result.status == "completed"
    assert "epoch 1/2" in out and "epoch 2/2" in out, out
    assert "valid" in out and "loss" in out
    assert "\r" not in out and "\x1b[" not in out  # plain lines


def test_fit_with_dashboard_false_prints_nothing(capsys):
    result = _learner(epochs=1).fit(_data(), dashboard=False)
    captured = capsys.readouterr()
    assert result.status == "completed"
    assert captured.out == "" and captured.err == ""


def test_fit_with_dashboard_true_demands_a_terminal(capsys):
    learner = _learner(epochs=1)
    with pytest.raises(ValueError, match="needs a terminal"):
        learner.fit(_data(), dashboard=True)
    assert learner.state.step == 0  # nothing trained
    with pytest.raises(ValueError, match="auto"):
        learner.fit(_data(), dashboard="yes")


def test_fit_refuses_a_checkpoint_its_model_cannot_take_before_writing_anything(tmp_path):
    """As `tuitrain run --resume` does: fit(resume=...) with a model of other shapes is a ValueError naming the
    first parameter that differs, and the run directory is left as it was (it failed in training after
    run.json had become 'failed')."""
    run = tmp_path / "run"
    assert _learner(epochs=1, run_dir=run).fit(_data(), dashboard=False).status == "completed"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    wide = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    other = tuitrain.Learner(
        wide, torch.optim.SGD(wide.parameters(), lr=0.1), loss_fn=nn.CrossEntropyLoss(), run_dir=run
    )
    checkpoint = sorted((run / "checkpoint").glob("*.pt"))[-1]
    with pytest.raises(
        ValueError, match=r"0\.weight is \[8, 4\] in the checkpoint and \[16, 4\] in this Learner's model"
    ):
        other.fit(_data(), resume=checkpoint, dashboard=False)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_experiment_of_an_api_run_is_its_folder_name(tmp_path):
    _learner(epochs=1, run_dir=tmp_path / "my-exp").fit(_data(), dashboard=False)
    assert json.loads((tmp_path / "my-exp" / "run.json").read_text())["experiment"] == "my-exp"
    assert "my-exp" in (tmp_path / "my-exp" / "experiment.log").read_text().splitlines()[0]


def test_fit_under_the_dashboard_returns_after_the_user_leaves(monkeypatch, tmp_path):
    """fit(dashboard=True) with the app driven by Pilot: trains on its thread, ends on the summary,
    `q` leaves, and fit returns the FitResult."""
    from textual.pilot import Pilot  # noqa: F401  (textual is there: the app is what is tested)

    import tuitrain.run.learner as api
    from tuitrain.dashboard import app as app_module
    from tuitrain.dashboard.screens.result_screen import ResultScreen

    seen = {}

    async def drive(self):
        async with self.run_test(size=(120, 40)) as pilot:
            for _ in range(600):
                await pilot.pause(0.05)
                if isinstance(self.screen, ResultScreen):
                    break
            seen["result_screen"] = isinstance(self.screen, ResultScreen)
            seen["steps"] = self.state.step
            await pilot.press("q")
            for _ in range(100):
                if not self.is_running:
                    break
                await pilot.pause(0.05)

    monkeypatch.setattr(api, "has_terminal", lambda: True)
    monkeypatch.setattr(app_module.DashboardApp, "run", lambda self: asyncio.run(drive(self)))
    learner = _learner(epochs=2, run_dir=tmp_path / "run")
    result = learner.fit(_data(), _data(seed=1), dashboard=True)
    assert seen == {"result_screen": True, "steps": 8}
    assert result.status == "completed" and result.exit_code == 0
    assert learner.capture_output is False  # the user's setting is back
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "completed"


SCRIPT = """
import json, sys, time
import torch
from torch import nn
from torch.utils.data import TensorDataset
import tuitrain

class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
    def forward(self, x):
        time.sleep(0.02)
        return self.lin(x)

torch.manual_seed(0)
x = torch.randn(64, 4)
data = TensorDataset(x, (x[:, 0] > 0).long())
model = Slow()
learner = tuitrain.Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.CrossEntropyLoss(),
                           batch_size=8, epochs=500, run_dir=sys.argv[1])
result = learner.fit(data, dashboard=sys.argv[2] if sys.argv[2] == "auto" else sys.argv[2] == "True")
with open(sys.argv[1] + ".result", "w") as f:
    json.dump({"status": result.status, "exit_code": result.exit_code}, f)
"""


def _script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


def _steps(run_dir) -> int:
    try:
        return json.loads((run_dir / "run.json").read_text()).get("step", 0)
    except (OSError, ValueError):
        return 0


def _tuitrain(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(),
        timeout=300,
    )


def _asked_for(run_dir) -> bool:
    """A request that came at a state saved already (an epoch's end) writes nothing new: that checkpoint is
    marked as asked for in the index instead (CI saw it: no "request" CheckpointSaved in 300 s)."""
    try:
        index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
    except (OSError, ValueError):
        return False
    return any(row.get("requested") for row in index)


def test_a_script_learner_obeys_tuitrain_checkpoint_and_stop(tmp_path):
    run_dir = tmp_path / "run"
    proc = python_popen(
        [_script(tmp_path), run_dir, "False"], tmp_path, cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(lambda: _steps(run_dir) >= 3, timeout=240, what="the script to train")  # torch imports first
        r = _tuitrain("checkpoint", run_dir, cwd=tmp_path)
        assert r.returncode == 0 and "took the request" in r.stdout, r.stderr
        wait_for(
            lambda: (
                any(
                    e["event"] == "CheckpointSaved" and e["reason"] == "request"
                    for e in read_events(run_dir, torn_ok=True)
                )
                or _asked_for(run_dir)
            ),
            what="the requested checkpoint",
        )
        r = _tuitrain("stop", run_dir, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads((tmp_path / "run.result").read_text()) == {"status": "interrupted", "exit_code": 130}
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted"
    index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
    # epochs are short here, so epoch checkpoints come and go around the one that was asked for
    # (a stop that lands on an epoch's last step finds that state on disk already, as "epoch")
    assert index[-1]["step"] == info["step"] and index[-1]["reason"] in ("stop", "epoch"), index[-1]
    sources = {(e["command"], e["source"]) for e in read_events(run_dir) if e["event"] == "ControlReceived"}
    assert {("checkpoint", "cli"), ("stop", "cli")} <= sources
    assert not list((run_dir / "control").glob("*.cmd"))
    r = _tuitrain("stop", run_dir, cwd=tmp_path)  # over now: said so, exit 1
    assert r.returncode == 1 and "not live" in r.stderr


def test_stop_on_a_live_run_that_does_not_listen_exits_1_and_withdraws_the_request(tmp_path, monkeypatch):
    """A process that says it is running (run.json, its pid alive) but polls no control folder."""
    from tuitrain.cli import main
    import tuitrain.cli as cli

    run_dir = tmp_path / "deaf"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"status": "running", "pid": os.getpid()}))
    monkeypatch.setattr(cli, "ACK_TIMEOUT", 0.5)
    assert main(["stop", str(run_dir)]) == 1
    assert not list((run_dir / "control").glob("*.cmd"))  # withdrawn: nobody will act on it later


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_a_script_in_a_terminal_shows_the_dashboard_and_stops_from_outside(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, str(_script(tmp_path)), str(run_dir), "auto"]
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="100", LINES="30")
    pid, fd = python_in_pty(cmd[1:], tmp_path, env)
    try:
        screen = b""
        deadline = time.time() + 240  # torch imports first
        while time.time() < deadline and _steps(run_dir) < 3:
            screen += read_pty(fd, 0.2)
        screen += read_pty(fd, 1.0)
        assert b"\x1b[?1049h" in screen  # the alternate screen: the dashboard, not plain lines
        assert b"checkpoints" in screen and b"progress" in screen
        r = _tuitrain("stop", run_dir, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        wait_for(
            lambda: json.loads((run_dir / "run.json").read_text())["status"] == "interrupted", what="the run to stop"
        )
        screen = read_pty(fd, 1.0)
        os.write(fd, b"q")  # the dashboard stays on the summary until the user leaves
        code, _ = wait_exit(pid, fd, 30)
        assert code == 0  # the script itself ends normally, with fit's result written
        assert json.loads((tmp_path / "run.result").read_text()) == {"status": "interrupted", "exit_code": 130}
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
