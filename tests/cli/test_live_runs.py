"""Steering a live headless run from outside: SIGTERM, `tuitrain stop`, `tuitrain checkpoint`,
`kill -9` followed by `--resume latest` (bitwise the same losses), and early stopping."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

# ~20 ms per forward pass: a live run lasts long enough to be steered, and is stopped long before its end
SLOW = ["--set", "model.sleep=0.02", "--set", "train.epochs=60", "--set", "checkpoint.keep_last=50"]


def status(run) -> dict:
    return json.loads((run / "run.json").read_text())


def index(run) -> list[dict]:
    try:
        return json.loads((run / "checkpoint" / "index.json").read_text())
    except (OSError, ValueError):
        return []


def wait_exit(proc: subprocess.Popen, timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("the run did not end in time")


@pytest.fixture
def reap():
    """Kill (by pid) any background run a failing test left behind."""
    procs: list[subprocess.Popen] = []
    yield procs.append
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_sigterm_stops_gracefully_with_a_checkpoint(tiny, reap):
    run = tiny.root / "run"
    proc = tiny.cli_bg("run", tiny.config, "--headless", "--run-dir", run, *SLOW)
    reap(proc)
    tiny.wait_for(lambda: tiny.last_train_step(run) >= 3, what="the run to train a few steps")
    proc.send_signal(signal.SIGTERM)
    assert wait_exit(proc) == 130
    info = status(run)
    assert info["status"] == "interrupted" and info["exit_code"] == 130
    # the state it stopped in is on disk: a "stop" checkpoint, or the epoch checkpoint of that very
    # state when the signal came right after one
    newest = max(index(run), key=lambda r: (r["step"], r["time"]))
    assert newest["reason"] in ("stop", "epoch"), index(run)
    assert [r["reason"] for r in index(run)].count("stop") <= 1
    last = tiny.last_train_step(run)
    assert newest["step"] == last == info["step"]
    assert last < 60 * 7
    names = [e["event"] for e in tiny.read_events(run)]
    assert "ControlReceived" in names and names[-1] == "RunFinished"

    # `--resume RUN_DIR` picks it up where it stopped (three more steps, then max_steps ends it)
    r = tiny.cli("run", tiny.config, "--headless", "--resume", run, *SLOW, "--set", f"train.max_steps={last + 3}")
    assert r.returncode == 0, r.stderr + r.stdout
    info = status(run)
    assert info["status"] == "completed" and info["step"] == last + 3
    events = tiny.read_events(run)
    assert [e["start_step"] for e in events if e["event"] == "RunStarted"] == [0, last]
    assert sorted(tiny.step_losses(events)) == list(range(1, last + 4))


def test_ctrl_c_on_a_headless_run_stops_it_gracefully_with_a_checkpoint(tiny, reap):
    """Ctrl+C at the terminal of a headless run (`run --headless`, or stdout to a file): SIGINT."""
    run = tiny.root / "run"
    proc = tiny.cli_bg("run", tiny.config, "--headless", "--run-dir", run, *SLOW)
    reap(proc)
    tiny.wait_for(lambda: tiny.last_train_step(run) >= 3, what="the run to train a few steps")
    proc.send_signal(signal.SIGINT)
    assert wait_exit(proc) == 130
    info = status(run)
    assert info["status"] == "interrupted" and info["exit_code"] == 130 and info["step"] < 60 * 7
    newest = max(index(run), key=lambda r: (r["step"], r["time"]))
    assert newest["reason"] in ("stop", "epoch") and newest["step"] == info["step"] == tiny.last_train_step(run)
    events = tiny.read_events(run)
    stops = [(e["source"], e["detail"]) for e in events if e["event"] == "ControlReceived"]
    assert stops == [("signal", "SIGINT")] and events[-1]["event"] == "RunFinished"
    (out,) = [p.read_text() for p in tiny.root.glob("bg-*.out")]  # what cli_bg's run printed
    assert "stop requested (signal: SIGINT)" in out and "Traceback" not in out and "KeyboardInterrupt" not in out


def test_checkpoint_and_stop_commands_steer_a_live_run(tiny, reap):
    run = tiny.root / "run"
    proc = tiny.cli_bg(
        "run", tiny.config, "--headless", "--run-dir", run, *SLOW, "--set", "checkpoint.every_n_epochs=1000"
    )  # only requested checkpoints
    reap(proc)
    tiny.wait_for(lambda: tiny.last_train_step(run) >= 2, what="the run to start training")
    assert index(run) == []

    r = tiny.cli("checkpoint", run)
    assert r.returncode == 0, r.stderr
    requested = tiny.wait_for(
        lambda: [e for e in index(run) if e["reason"] == "request"],
        what="a checkpoint with reason 'request' in the index",
    )
    assert (run / "checkpoint" / requested[0]["file"]).is_file()
    assert proc.poll() is None, "a checkpoint request must not end the run"

    r = tiny.cli("stop", run)
    assert r.returncode == 0, r.stderr
    assert wait_exit(proc) == 130
    info = status(run)
    assert info["status"] == "interrupted"
    reasons = [e["reason"] for e in index(run)]
    # "stop" is left out only when the run stopped in the very state the request saved
    assert reasons in (["request", "stop"], ["request"]), reasons
    assert index(run)[-1]["step"] == info["step"]
    sources = [(e["command"], e["source"]) for e in tiny.read_events(run) if e["event"] == "ControlReceived"]
    assert ("checkpoint", "cli") in sources and ("stop", "cli") in sources
    # and now the run is over, the commands say so
    r = tiny.cli("stop", run)
    assert r.returncode == 1 and "not live" in r.stderr


def test_kill_9_then_resume_latest_is_bitwise_the_same_run(tiny, reap):
    sets = ["--set", "model.sleep=0.03", "--set", "train.epochs=5", "--set", "checkpoint.every_n_steps=3"]
    total = 5 * 7
    proc = tiny.cli_bg("run", tiny.config, "--headless", *sets)
    reap(proc)
    run = tiny.wait_for(lambda: (tiny.run_dirs() or [None])[0], what="the run directory")
    # kill mid-epoch 2 (steps 8-14), after step checkpoints exist, in the middle of whatever it does
    tiny.wait_for(lambda: tiny.last_train_step(run) >= 11, what="step 11")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = tiny.last_train_step(run)
    assert killed_at < total, "the run ended before it could be killed"
    assert status(run)["status"] == "running"  # nobody could write anything else
    r = tiny.cli("ls", "runs")
    assert "killed" in r.stdout, r.stdout
    text_before = (run / "events.jsonl").read_text()
    lines_before = text_before.count("\n")

    r = tiny.cli("run", tiny.config, "--headless", "--resume", "latest", *sets)
    assert r.returncode == 0, r.stderr + r.stdout
    assert tiny.run_dirs() == [run], "a resumed run continues in its own run directory"
    info = status(run)
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["step"] == total
    assert (run / "events.jsonl").read_text().startswith(text_before), "events.jsonl is appended to"
    events = tiny.read_events(run, torn_ok=True)  # the killed writer may have cut its last line
    assert len(events) > lines_before
    started = [e for e in events if e["event"] == "RunStarted"]
    assert len(started) == 2
    assert started[1]["resumed_from"] and "checkpoint" in started[1]["resumed_from"]
    assert 0 < started[1]["start_step"] <= killed_at
    resumed = tiny.step_losses(events)
    assert not [p for p in (run / "checkpoint").iterdir() if p.name.startswith(".tmp-")]

    ref = tiny.root / "ref"
    r = tiny.cli("run", tiny.config, "--headless", "--run-dir", ref, *sets)
    assert r.returncode == 0, r.stderr
    expected = tiny.step_losses(tiny.read_events(ref))
    assert sorted(expected) == list(range(1, total + 1))
    assert sorted(resumed) == sorted(expected)
    diff = {s: (resumed[s], expected[s]) for s in expected if resumed[s] != expected[s]}
    assert not diff, f"killed at step {killed_at}; steps whose loss differs: {diff}"
    print(f"killed at step {killed_at}, resumed from step {started[1]['start_step']}")


def test_early_stopping_exits_0_and_says_why(tiny):
    # lr = 0: the weights never change, so valid/loss never improves; patience 1 stops after epoch 2
    r = tiny.cli(
        "run",
        tiny.config,
        "--headless",
        "--set",
        "optimizer.lr=0.0",
        "--set",
        "train.epochs=6",
        "--set",
        "early_stopping.patience=1",
        "--set",
        'early_stopping.monitor="valid/loss"',
    )
    assert r.returncode == 0, r.stderr + r.stdout
    (run,) = tiny.run_dirs()
    info = status(run)
    assert info["status"] == "completed" and info["exit_code"] == 0
    assert info["reason"] == "early_stopping"
    assert info["epoch"] == 2 and info["step"] == 14
    assert "early stopping" in r.stdout.lower()
    assert "early stopping" in (run / "experiment.log").read_text().lower()
    finished = [e for e in tiny.read_events(run) if e["event"] == "RunFinished"]
    assert finished[0]["reason"] == "early_stopping"


def test_resume_of_a_live_run_is_refused(tiny, reap):
    run = tiny.root / "run"
    proc = tiny.cli_bg("run", tiny.config, "--headless", "--run-dir", run, *SLOW)
    reap(proc)
    tiny.wait_for(lambda: index(run), what="a first checkpoint")
    try:
        r = tiny.cli("run", tiny.config, "--headless", "--resume", run, "--set", "train.max_steps=9")
        assert proc.poll() is None, "the first run must still be live for this test to mean anything"
    finally:
        proc.kill()
        proc.wait()
    assert r.returncode == 2, r.stdout[-300:]
    assert "Traceback" not in r.stderr


STREAMPROJ = '''
import torch
from torch.utils.data import IterableDataset


class Stream(IterableDataset):
    """A stream whose position is its state: item i is made from (seed, i) alone."""

    def __init__(self, n, seed):
        self.n, self.seed, self.pos = n, seed, 0

    def __iter__(self):
        while self.pos < self.n:
            g = torch.Generator().manual_seed(self.seed * 100_003 + self.pos)
            self.pos += 1
            yield torch.randn(4, generator=g), int(torch.randint(0, 3, (1,), generator=g))
        self.pos = 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


def streams(n=100, seed=0):
    return Stream(n, seed), None
'''


def test_kill_9_of_a_stateful_stream_then_resume_latest_is_bitwise_the_same_run(tiny, reap):
    (tiny.root / "streamproj.py").write_text(STREAMPROJ)
    text = tiny.config.read_text().replace('target = "tinyproj:datasets"', 'target = "streamproj:streams"')
    config = tiny.write_config("stream.toml", text.replace("shuffle = true", "shuffle = false"))
    sets = [
        "--set",
        "model.sleep=0.03",
        "--set",
        "train.epochs=4",
        "--set",
        "checkpoint.every_n_steps=3",
        "--set",
        "checkpoint.monitor=train/loss",
        "--set",
        'metrics.valid=["loss"]',
    ]
    total = 4 * 7  # 100 items in batches of 16
    proc = tiny.cli_bg("run", config, "--headless", *sets)
    reap(proc)
    run = tiny.wait_for(lambda: (tiny.run_dirs() or [None])[0], what="the run directory")
    tiny.wait_for(lambda: tiny.last_train_step(run) >= 11, what="step 11")  # mid-epoch 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = tiny.last_train_step(run)
    assert killed_at < total, "the run ended before it could be killed"
    r = tiny.cli("run", config, "--headless", "--resume", "latest", *sets)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "restarts" not in r.stdout + r.stderr  # the stream continues from its position
    events = tiny.read_events(run, torn_ok=True)
    started = [e for e in events if e["event"] == "RunStarted"]
    assert len(started) == 2 and 0 < started[1]["start_step"] <= killed_at
    assert started[1]["start_step"] % 7 != 0, "resumed mid-epoch"
    resumed = tiny.step_losses(events)
    ref = tiny.root / "ref"
    r = tiny.cli("run", config, "--headless", "--run-dir", ref, *sets)
    assert r.returncode == 0, r.stderr
    expected = tiny.step_losses(tiny.read_events(ref))
    assert sorted(expected) == list(range(1, total + 1)) and sorted(resumed) == sorted(expected)
    diff = {s: (resumed[s], expected[s]) for s in expected if resumed[s] != expected[s]}
    assert not diff, f"killed at step {killed_at}; steps whose loss differs: {diff}"
