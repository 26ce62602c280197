import json
import os
import subprocess
import sys
from datetime import datetime

from sink_run import BEST, T0, feed, run_events
from tuitrain.core.events import MetricsLogged, RunFailed, RunPaused
from tuitrain.sinks.run_status import RunStatusWriter, is_live, live_status, read_run


def writer(tmp_path, interval=5.0):
    now = [0.0]
    return RunStatusWriter(tmp_path, interval=interval, clock=lambda: now[0]), now


def test_a_completed_run(tmp_path):
    w, _ = writer(tmp_path)
    events = run_events(tmp_path)
    feed(w, events[:1])
    run = read_run(tmp_path)
    assert run["status"] == "running" and run["exit_code"] is None and run["ended"] is None
    assert run["started"] == datetime.fromtimestamp(T0).astimezone().isoformat(timespec="seconds")
    assert datetime.fromisoformat(run["started"]).timestamp() == T0  # carries its UTC offset
    assert run["pid"] == os.getpid() and run["experiment"] == "spirals" and run["resumes"] == 0
    assert run["env"] == {"python": "3.11.4", "torch": "2.13.0", "devices": ["cpu"]}
    assert is_live(tmp_path) and live_status(tmp_path) == "running"
    feed(w, events[1:])
    w.close()
    run = read_run(tmp_path)
    assert run["status"] == "completed" and run["exit_code"] == 0 and run["reason"] == "epochs"
    assert run["ended"] == datetime.fromtimestamp(events[-1].time).astimezone().isoformat(timespec="seconds")
    assert (run["epoch"], run["step"]) == (2, 8)
    assert run["best"] == {**BEST, "epoch": 2, "step": 8}
    assert not is_live(tmp_path) and live_status(tmp_path) == "completed"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left behind


def test_best_comes_from_the_best_checkpoint_before_the_end(tmp_path):
    w, _ = writer(tmp_path)
    feed(w, run_events(tmp_path)[:-1])
    assert read_run(tmp_path)["best"] == {
        "file": "checkpoint/epoch-2.pt",
        "monitor": "valid/loss",
        "value": 0.1 + 0.2,
        "epoch": 2,
        "step": 8,
    }


def test_step_progress_is_written_at_most_every_interval(tmp_path):
    w, now = writer(tmp_path, interval=5.0)
    feed(w, run_events(tmp_path)[:1])
    m = lambda s: MetricsLogged(split="train", epoch=1, step=s, metrics={"loss": 1.0})  # noqa: E731
    now[0] = 1.0
    w(m(1))
    assert read_run(tmp_path)["step"] == 0  # RunStarted was written just now
    now[0] = 5.0
    w(m(2))
    assert read_run(tmp_path)["step"] == 2
    now[0] = 9.0
    w(m(3))
    assert read_run(tmp_path)["step"] == 2
    w(RunPaused(epoch=1, step=3))
    assert read_run(tmp_path)["paused"] is True and read_run(tmp_path)["step"] == 3


def test_a_resumed_run_keeps_started_and_counts_resumes(tmp_path):
    w, _ = writer(tmp_path)
    feed(w, run_events(tmp_path)[:5])
    w.close()
    first = read_run(tmp_path)
    later = run_events(tmp_path, resumed_from="checkpoint/epoch-1.pt", start_epoch=2)
    w, _ = writer(tmp_path)
    feed(w, later[:1])
    run = read_run(tmp_path)
    assert run["started"] == first["started"] and run["resumes"] == 1 and run["epoch"] == 2
    w(RunFailed(error="ValueError: bad shape", traceback="...", epoch=2, step=6, time=T0 + 100))
    run = read_run(tmp_path)
    assert (run["status"], run["exit_code"], run["error"]) == ("failed", 1, "ValueError: bad shape")
    w, _ = writer(tmp_path)
    feed(w, later[:1])
    assert read_run(tmp_path)["resumes"] == 2
    w, _ = writer(tmp_path)
    feed(w, run_events(tmp_path)[:1])  # a fresh run in the same folder starts over
    assert read_run(tmp_path)["resumes"] == 0


def test_a_killed_run_is_not_live(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    run = {"status": "running", "pid": int(dead.stdout), "exit_code": None}
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert live_status(tmp_path) == "killed" and not is_live(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({**run, "host": "elsewhere"}))
    assert live_status(tmp_path) == "running"  # another machine's pid cannot be checked here
    (tmp_path / "run.json").write_text("{not json")
    assert read_run(tmp_path) is None and live_status(tmp_path) == "unknown"
    assert read_run(tmp_path / "missing") is None
