"""After a stop (exit 130) the terminal says how to go on (issue 51): `continue it: tuitrain run CONFIG
--set ... --resume ABSOLUTE_RUN_DIR`, a line that works as printed, and the checkpoints by absolute
paths; headless and with the dashboard alike."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import cli_env, python_popen
from tuitrain.cli import main

SLOW = ["--set", "model.sleep=0.02", "--set", "train.epochs=60"]


def continue_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("continue it: ")]
    assert len(lines) == 1, out
    return lines[0].removeprefix("continue it: ")


def test_a_stopped_headless_run_says_the_line_that_continues_it_and_the_line_works(tiny):
    proc = tiny.cli_bg("run", "tiny.toml", "--headless", *SLOW)  # the config as a user types it
    try:
        run = tiny.wait_for(lambda: (tiny.run_dirs() or [None])[0], what="the run directory")
        tiny.wait_for(lambda: tiny.last_train_step(run) >= 3, what="a few steps")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    (out,) = [p.read_text() for p in tiny.root.glob("bg-*.out")]
    line = continue_line(out)
    assert line == shlex.join(["tuitrain", "run", "tiny.toml", *SLOW, "--headless", "--resume", str(run)])
    assert run.is_absolute()
    last = next(l for l in out.splitlines() if l.startswith("last checkpoint: ")).split(": ", 1)[1]
    assert last.startswith(str(run) + "/checkpoint/") and (tiny.root / last).is_file()
    # the line as printed continues the run (stopped again at once)
    argv = shlex.split(line)
    again = python_popen(
        ["-m", "tuitrain", *argv[1:]], tiny.root, cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        step = json.loads((run / "run.json").read_text())["step"]
        tiny.wait_for(lambda: tiny.last_train_step(run) > step, what="the resumed run to train")
        again.send_signal(signal.SIGINT)
        out2, _ = again.communicate(timeout=300)
    finally:
        if again.poll() is None:
            again.kill()
    assert again.returncode == 130, out2
    assert f"resumed from {run}/checkpoint/" in out2
    assert continue_line(out2) == line  # the same run, continued the same way


def test_without_a_checkpoint_it_says_there_is_nothing_to_continue(tmp_path):
    from argparse import Namespace

    from tuitrain.cli import way_on

    args = Namespace(config="demo/x.toml", overrides=["train.epochs=3"], headless=False, theme=None)
    line = way_on(args, tmp_path)
    assert "no checkpoint was written" in line and "tuitrain run demo/x.toml" in line
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "a.pt").write_bytes(b"x")
    (tmp_path / "checkpoint" / "index.json").write_text(json.dumps([{"file": "a.pt", "epoch": 1, "step": 2}]))
    assert way_on(args, tmp_path) == (f"continue it: tuitrain run demo/x.toml --set train.epochs=3 --resume {tmp_path}")


def test_the_dashboards_stop_says_it_too(tiny, capsys, monkeypatch, forget_tinyproj):
    """With the dashboard (stdout a terminal): the line follows the screen's own end."""
    import tuitrain.dashboard.entry as entry

    def fake_live(run, theme):  # the screen, its run stopped by q y after a checkpoint
        folder = run.run_dir / "checkpoint"
        folder.mkdir(parents=True)
        (folder / "epoch-0001.pt").write_bytes(b"x")
        (folder / "index.json").write_text(json.dumps([{"file": "epoch-0001.pt", "epoch": 1, "step": 7}]))
        return 130

    monkeypatch.setattr(entry, "run_live", fake_live)
    from tuitrain.run.runner import Run

    monkeypatch.setattr(Run, "install_signal_handlers", lambda self, **kw: None)  # not this process's
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.chdir(tiny.root)
    code = main(["run", "tiny.toml", "--set", "train.epochs=5"])
    out, _ = capsys.readouterr()
    assert code == 130
    (run,) = tiny.run_dirs()
    assert continue_line(out) == f"tuitrain run tiny.toml --set train.epochs=5 --resume {run}"
