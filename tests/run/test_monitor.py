"""`tuitrain.Monitor` around a loop of the user's own: the run directory it writes, the controls it
obeys (stop, pause, checkpoint through the control folder, as `tuitrain stop/checkpoint` send them),
and what an exception in the block leaves behind."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from tests.conftest import read_events, wait_for
from tuitrain import Monitor
from tuitrain.core.control import FileControl


def _run_json(run_dir):
    return json.loads((run_dir / "run.json").read_text())


def test_a_loop_under_monitor_writes_a_run_directory(tmp_path, capsys):
    model = torch.nn.Linear(3, 1)
    with Monitor(experiment="mine", config={"lr": 0.1, "layers": 2}, dir=tmp_path, dashboard=False) as mon:
        for step in range(1, 31):
            loss = torch.tensor(1.0 / step)
            mon.log(step, loss=loss, lr=0.1)  # a 0-d tensor and a float
            if step % 10 == 0:
                mon.log(step, split="valid", loss=2.0 / step)
        saved = mon.save_checkpoint({"model": model.state_dict(), "step": 30})
    run_dir = mon.run_dir
    assert run_dir.parent == tmp_path / "mine"
    info = _run_json(run_dir)
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["experiment"] == "mine"
    assert "lr = 0.1" in (run_dir / "config.toml").read_text()
    events = read_events(run_dir)
    train = [e for e in events if e["event"] == "MetricsLogged" and e["split"] == "train"]
    assert [e["step"] for e in train] == list(range(1, 31))
    assert train[-1]["metrics"] == {"loss": pytest.approx(1 / 30), "lr": 0.1}
    valid = [e["metrics"]["loss"] for e in events if e["event"] == "MetricsLogged" and e["split"] == "valid"]
    assert valid == pytest.approx([0.2, 0.1, 2 / 30])
    assert events[-1]["event"] == "RunFinished"
    state = torch.load(saved, weights_only=True)
    assert torch.equal(state["model"]["weight"], model.weight) and state["step"] == 30
    index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
    assert [e["file"] for e in index] == [saved.name]
    assert capsys.readouterr().out == ""  # dashboard=False: tuitrain prints nothing


def test_prints_in_the_block_reach_experiment_log_and_the_console_lines(tmp_path, capsys):
    with Monitor(run_dir=tmp_path / "r", dashboard="auto") as mon:  # no terminal here: console lines
        print("hello from the loop")
        mon.log(1, loss=0.5)
    assert "hello from the loop" in (tmp_path / "r" / "experiment.log").read_text()
    assert "hello from the loop" in capsys.readouterr().out
    assert _run_json(tmp_path / "r")["experiment"] == "r"  # named after its folder
    assert "| train | loss   | 0.5000 | 0.5000 |" in (tmp_path / "r" / "experiment.log").read_text()


def test_an_exception_in_the_block_fails_the_run_and_propagates(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with Monitor(run_dir=tmp_path / "r", dashboard=False) as mon:
            mon.log(1, loss=0.5)
            raise RuntimeError("boom")
    info = _run_json(tmp_path / "r")
    assert info["status"] == "failed" and info["exit_code"] == 1 and "boom" in info["error"]


def test_stop_checkpoint_and_pause_from_the_control_folder(tmp_path):
    """What `tuitrain stop/checkpoint` and the dashboard's keys send, taken by a loop under Monitor."""
    run_dir = tmp_path / "r"
    control = FileControl(run_dir)
    seen = {"checkpoints": 0, "step": 0, "entered_paused": 0, "returned_paused": 0}
    resume_sent = threading.Event()

    def steer(mon):  # as another shell would, each command once the one before it has been taken
        wait_for(lambda: seen["entered_paused"], what="the loop to reach a Monitor call while paused")
        resume_sent.set()
        control.send("resume", "cli")
        wait_for(lambda: not mon.interrupter.paused, what="the resume")
        resumed_at = seen["step"]
        wait_for(lambda: seen["step"] >= resumed_at + 3, what="steps after the resume")
        control.request_stop("cli")

    def call(read):  # a Monitor call entered while paused returns only once the resume is sent
        paused = mon.interrupter.paused
        seen["entered_paused"] += paused
        value = read()
        seen["returned_paused"] += paused and not resume_sent.is_set()
        return value

    with Monitor(run_dir=run_dir, dashboard=False) as mon:
        asked = False
        while seen["step"] < 100_000:
            if call(lambda: mon.stop_requested):  # a pause waits here, or in log, whichever comes first
                break
            seen["step"] += 1
            step = seen["step"]
            call(lambda: mon.log(step, loss=1.0 / step))
            if mon.checkpoint_requested:
                mon.save_checkpoint({"step": torch.tensor(step)})
                seen["checkpoints"] += 1
            if step == 5 and not asked:
                asked = True
                control.request_checkpoint("cli")
                control.send("pause", "cli")
                # paused before the next Monitor call, outside one (nothing but `steer` resumes it)
                wait_for(lambda: mon.interrupter.paused, what="the pause")
                threading.Thread(target=steer, args=(mon,), daemon=True).start()
            time.sleep(0.005)
    info = _run_json(run_dir)
    assert info["status"] == "interrupted" and info["exit_code"] == 130
    assert seen["checkpoints"] == 2  # the one asked for, and the one the stop raised
    assert seen["entered_paused"] >= 1 and seen["returned_paused"] == 0  # the loop waited while paused
    kinds = [e["event"] for e in read_events(run_dir)]
    assert "RunPaused" in kinds and "RunResumed" in kinds and "CheckpointSaved" in kinds
    commands = {e["command"] for e in read_events(run_dir) if e["event"] == "ControlReceived"}
    assert {"checkpoint", "pause", "resume", "stop"} <= commands
    wait_for(lambda: not list((run_dir / "control").glob("*.cmd")), what="every command taken")


def test_log_reads_values_off_the_loop_s_thread(tmp_path):
    """`log` only appends: the Monitor's thread reads each value (a tensor's .item() would wait for the
    device there, never in the loop); how long a call takes is benchmarks/bench_monitor.py's business."""

    class Value:  # a 0-d tensor's part: item() says which thread read it
        def __init__(self, v):
            self.v, self.read_on = v, None

        def item(self):
            self.read_on = threading.current_thread()
            return self.v

    values = []
    with Monitor(run_dir=tmp_path / "r", dashboard=False) as mon:
        for step in range(1, 201):
            values.append(Value(1.0 / step))
            mon.log(step, loss=values[-1])
            assert values[-1].read_on is not threading.current_thread()
        wait_for(lambda: all(v.read_on for v in values), what="the Monitor's thread to read every value")
    assert {v.read_on.name for v in values} == {"tuitrain-monitor"}
    logged = {e["step"]: e["metrics"]["loss"] for e in read_events(tmp_path / "r") if e["event"] == "MetricsLogged"}
    assert logged == {step: 1.0 / step for step in range(1, 201)}


def test_the_dashboard_shows_a_monitored_loop_by_its_steps_without_epochs(tmp_path):
    """No epochs in a loop of one's own: the progress panel counts steps against `max_steps` and gives
    items/s only from the `batch_size` the loop passed."""
    import asyncio

    from tests.dashboard.test_app import SIZE, shown, until
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.sources.run_files import FileSource
    from tuitrain.dashboard.panels.progress_panel import ProgressPanel
    from tuitrain.dashboard.screens.result_screen import result_body

    def loop(run_dir, **sizes):
        with Monitor(run_dir=run_dir, dashboard=False, **sizes) as mon:
            for step in range(1, 21):
                time.sleep(0.01)
                mon.log(step, loss=1.0 / step)

    async def panel(run_dir):
        app = DashboardApp(FileSource(run_dir, poll=0.02), None, watch=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.state.ended)
            await pilot.pause()
            body = result_body(app.state, 0)
            assert body.startswith("completed · step 20 · ")  # no "epoch 0"
            return shown(app.query_one(ProgressPanel))

    loop(tmp_path / "sized", max_steps=20, batch_size=8)
    sized = asyncio.run(panel(tmp_path / "sized"))
    assert "Step  20 / 20" in sized and "items/s" in sized and "it/s" in sized and "Epoch" not in sized
    loop(tmp_path / "bare")
    bare = asyncio.run(panel(tmp_path / "bare"))
    assert "Step  20 " in bare and "/ 20" not in bare and "items/s" not in bare and "it/s" in bare
    assert "Epoch" not in bare
    with pytest.raises(ValueError, match="max_steps"):
        Monitor(run_dir=tmp_path / "bad", dashboard=False, max_steps=-1)


MONITORED_LOOP = """
import sys, time
from tuitrain import Monitor

with Monitor(run_dir=sys.argv[1], max_steps=100000, batch_size=4) as mon:
    step = 0
    while not mon.stop_requested:
        step += 1
        time.sleep(0.02)
        mon.log(step, loss=1.0 / step)
        if mon.checkpoint_requested:
            mon.save_checkpoint({"step": step})
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs a pty")
def test_ctrl_c_in_the_dashboard_of_a_monitored_loop_stops_the_loop(tmp_path):
    """A person at a terminal: the loop's dashboard comes up, Ctrl+C there stops the loop (not only
    the viewer), the run ends interrupted and the script ends normally with the terminal back."""
    import os
    import subprocess
    import sys

    from tests.conftest import cli_env, end_pty, python_in_pty, read_pty, wait_exit

    (tmp_path / "loop.py").write_text(MONITORED_LOOP)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, str(tmp_path / "loop.py"), str(run_dir)]
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="100", LINES="30")
    pid, fd = python_in_pty(cmd[1:], tmp_path, env)

    def logged() -> int:
        try:
            return (run_dir / "events.jsonl").read_text().count('"MetricsLogged"')
        except OSError:
            return 0

    try:
        screen = b""
        deadline = time.time() + 300  # two processes import torch and textual first
        while time.time() < deadline and not (logged() >= 3 and b"progress" in screen):
            screen += read_pty(fd, 0.2)
        assert b"\x1b[?1049h" in screen and b"progress" in screen  # the dashboard, in its own screen
        r = subprocess.run(
            [sys.executable, "-m", "tuitrain", "checkpoint", str(run_dir)],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr  # from another shell: the loop answers it
        wait_for(lambda: (run_dir / "checkpoint" / "index.json").exists(), what="the requested checkpoint")
        os.write(fd, b"p")  # pause: the loop waits inside its next mon.log
        wait_for(lambda: _run_json(run_dir).get("paused"), what="the pause")
        screen += read_pty(fd, 1.0)
        names = [e["event"] for e in read_events(run_dir, torn_ok=True)]
        assert "MetricsLogged" not in names[names.index("RunPaused") :]  # the loop waits
        os.write(fd, b"\x03")  # Ctrl+C: a key to the dashboard, which holds the terminal in raw mode
        code, more = wait_exit(pid, fd, 300)
        screen += more
        assert code == 0, screen[-2000:]
        assert _run_json(run_dir)["status"] == "interrupted"
        commands = [(e["command"], e["source"]) for e in read_events(run_dir) if e["event"] == "ControlReceived"]
        assert commands == [("checkpoint", "cli"), ("pause", "dashboard"), ("stop", "dashboard")], commands
        index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
        assert [e["reason"] for e in index][:1] == ["request"] and len(index) == 2  # and the stop's own
        assert b"\x1b[?1049l" in screen  # the terminal's own screen is back
    finally:
        end_pty(pid, fd)


def test_a_checkpoint_saved_for_a_request_is_marked_requested_and_outlives_keep_last(tmp_path):
    """`tuitrain checkpoint` (the control folder) raises checkpoint_requested; the loop's save for it is
    the user's: marked in index.json and never deleted by keep_last, which counts only the others."""
    run_dir = tmp_path / "r"
    with Monitor(run_dir=run_dir, dashboard=False, keep_last=2) as mon:
        for step in range(1, 13):
            mon.log(step, loss=1.0 / step)
            if step == 2:
                FileControl(run_dir).request_checkpoint("cli")
                wait_for(lambda: mon.checkpoint_requested, what="the request")
            if mon.checkpoint_requested or step % 3 == 0:  # and a checkpoint of the loop's own every 3 steps
                mon.save_checkpoint({"step": torch.tensor(step)}, step=step)
    rows = json.loads((run_dir / "checkpoint" / "index.json").read_text())
    assert [(r["step"], r["reason"], r.get("requested_by")) for r in rows] == [
        (2, "request", "command"),
        (9, "api", None),
        (12, "api", None),
    ]
    assert rows[0]["requested"] is True and (run_dir / "checkpoint" / rows[0]["file"]).is_file()
    saved = [e for e in read_events(run_dir) if e["event"] == "CheckpointSaved"]
    assert [(e["step"], e["requested"]) for e in saved] == [(2, "command"), (3, ""), (6, ""), (9, ""), (12, "")]


class Unprintable:
    def __str__(self):
        raise RuntimeError("no str for this")


def test_alert_levels_info_warn_and_a_bogus_one_never_raise(tmp_path):
    run_dir = tmp_path / "r"
    with Monitor(run_dir=run_dir, dashboard=False) as mon:
        mon.log(1, loss=1.0)
        mon.alert("halfway", "half the steps are done", level="info")
        mon.alert("slow", "a slow batch", level="warn")
        mon.alert(42, Unprintable(), level="loud")  # not strings, an unknown level: no raise
        mon.alert("again", level="loud")
        mon.alert("err", level="error")
    raised = [e for e in read_events(run_dir) if e["event"] == "AlertRaised"]
    assert [(a["title"], a["level"], a["rule"]) for a in raised] == [
        ("halfway", "info", "user"),
        ("slow", "warning", "user"),
        ("42", "warning", "user"),
        ("again", "warning", "user"),
        ("err", "error", "user"),
    ]
    assert [a["text"] for a in raised[:4]] == ["half the steps are done", "a slow batch", "<Unprintable>", "again"]
    said = [e["text"] for e in read_events(run_dir) if e["event"] == "OutputPrinted" and "'loud'" in e["text"]]
    assert len(said) == 1 and "warning" in said[0]  # the unknown level said once, not once per alert
    log = (run_dir / "experiment.log").read_text()
    assert "INFO  alert [user] halfway" in log and "WARN  alert [user] slow" in log
