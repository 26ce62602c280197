"""The dashboard under Pilot: fed a recorded run, driven by keys, steering a recording controller."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest
from textual.geometry import Region
from textual.widgets import Static

from tuitrain.core.control import Interrupter
from tuitrain.core.events import ControlReceived, RunFinished
from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.live import LiveApp, LiveRun
from tuitrain.sources.run_files import FileSource, ReplaySource
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.panels.checkpoint_list import CheckpointList
from tuitrain.dashboard.screens.confirm_screen import ConfirmScreen
from tuitrain.dashboard.panels.control_bar import ControlBar
from tuitrain.dashboard.panels.devices_panel import DevicesPanel
from tuitrain.dashboard.screens.help_screen import HelpScreen
from tuitrain.dashboard.charts.metric_plot import MetricPlot
from tuitrain.dashboard.panels.output_log import OutputLog
from tuitrain.dashboard.panels.progress_panel import ProgressPanel
from tuitrain.dashboard.screens.result_screen import ResultScreen

from .fixtures import T0, last_time, recorded_run, write_jsonl

SIZE = (120, 40)


def sync(fn):
    """Run an async test body with asyncio (no async pytest plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


class RecordingController:
    """A `Controller` that only writes down what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def request_stop(self, source: str = "api", detail: str = "") -> None:
        self.calls.append(("stop", source, detail))

    def toggle_pause(self, source: str = "api") -> None:
        self.calls.append(("pause", source))

    def request_checkpoint(self, source: str = "api") -> None:
        self.calls.append(("checkpoint", source))


def make_app(events=None, controller=None, **kw) -> DashboardApp:
    events = recorded_run(epochs=3, total_epochs=5, end="running") if events is None else events
    clock = kw.pop("clock", lambda: last_time(events) + 30)
    source = kw.pop("source", None) or ReplaySource(events)
    return DashboardApp(source, controller, clock=clock, **kw)


def shown(widget) -> str:
    """What a widget shows on screen, borders included, as plain text."""
    strips = widget.render_lines(Region(0, 0, widget.outer_size.width, widget.outer_size.height))
    return "\n".join(strip.text for strip in strips)


def loss_chart(app) -> MetricPlot:
    return app.query_one(ChartGrid).charts["loss"]


async def until(pilot, condition, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not met in time")


# --- feeding --------------------------------------------------------------------------------


def plot_cost(app) -> float:
    from tuitrain.dashboard.charts.chart_grid import ChartGrid

    return app.query_one(ChartGrid).build_cost()


@sync
async def test_recorded_run_fills_plot_devices_checkpoints_and_log():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        plot = app.query_one(ChartGrid).charts["loss"]
        assert plot.metric == "loss"
        train_x, train_y = plot.points["train"]
        assert len(train_x) == 60 and train_x[0] == 1 and train_x[-1] == 60
        assert train_y[0] == pytest.approx(2.0 / 1.1)
        assert plot.points["valid"][0] == [20, 40, 60]
        assert plot.boundaries == [20, 40]  # epoch ends inside the plotted range
        assert plot.title_text.startswith("loss") and "0.2857" in plot.title_text  # the latest train loss

        devices = app.query_one(DevicesPanel)
        assert devices.sample is not None and devices.sample.cpu == 37.5
        assert [g["name"] for g in devices.gpus] == ["Fake A100"]

        ckpt = app.query_one(CheckpointList)
        assert [r["file"] for r in ckpt.rows] == ["checkpoint/epoch-3.pt", "checkpoint/epoch-2.pt"]
        assert ckpt.best_file == "checkpoint/epoch-2.pt"

        log = app.query_one(OutputLog)
        assert log.count == 3
        progress = app.query_one(ProgressPanel)
        assert progress.status == "running" and progress.has_class("-running")
        # the screen shows it: best marker on epoch 2's row only, ages from the frozen clock
        svg = app.export_screenshot()
        assert "epoch-2.pt" in svg and "epoch-3.pt" in svg


@sync
async def test_checkpoint_rows_render_newest_first_with_best_marker():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        lines = [line for line in shown(app.query_one(CheckpointList)).splitlines() if ".pt" in line]
        assert len(lines) == 2
        assert "epoch-3.pt" in lines[0] and "★" not in lines[0]
        assert "epoch-2.pt" in lines[1] and lines[1].lstrip("│ ").startswith("★")
        assert "30s" in lines[0]  # age against the frozen clock (saved 30 s before it)


@sync
async def test_new_events_are_drained_while_running():
    events = recorded_run(epochs=1, total_epochs=3, end="running")
    source = ReplaySource(events)
    app = make_app(events, source=source)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(loss_chart(app).points["train"][0]) == 20)
        more = recorded_run(epochs=2, total_epochs=3, end="running")[len(events) :]
        threading.Thread(target=source.push, args=tuple(more)).start()  # from another thread, like training
        await until(pilot, lambda: app.state.step == 40)
        await until(pilot, lambda: len(loss_chart(app).points["train"][0]) == 40)
        assert app.query_one(ProgressPanel).status == "running"


# --- keys reach the controller ----------------------------------------------------------------


@sync
async def test_c_and_p_reach_the_controller():
    ctl = RecordingController()
    app = make_app(controller=ctl)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("c", "p", "p")
        assert ctl.calls == [("checkpoint", "dashboard"), ("pause", "dashboard"), ("pause", "dashboard")]


@sync
async def test_buttons_reach_the_controller():
    ctl = RecordingController()
    app = make_app(controller=ctl)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.click("#button-checkpoint")
        await pilot.click("#button-pause")
        assert ctl.calls == [("checkpoint", "dashboard"), ("pause", "dashboard")]
        await pilot.click("#button-stop")
        assert isinstance(app.screen, ConfirmScreen)  # Stop asks, as q does


@sync
async def test_q_then_n_cancels_and_keeps_training():
    ctl = RecordingController()
    app = make_app(controller=ctl)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("q", "tab")  # any other key cancels, Tab too
        assert not isinstance(app.screen, ConfirmScreen)
        assert ctl.calls == [] and app.is_running


@sync
async def test_q_then_y_stops_and_leaves_once_training_ended():
    ctl = RecordingController()
    events = recorded_run(epochs=2, total_epochs=5, end="running")
    source = ReplaySource(events, exit_code=130)
    app = make_app(events, controller=ctl, source=source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q", "y")
        assert ctl.calls == [("stop", "dashboard", "quit")]
        assert app.is_running and app.leave_when_done  # waits for the graceful stop
        await pilot.pause()
        assert "leaving when stopped" in shown(app.query_one(ProgressPanel))
        source.push(
            ControlReceived(command="stop", source="dashboard", detail="quit"),
            RunFinished(
                status="interrupted",
                exit_code=130,
                epoch=2,
                step=40,
                reason="stopped",
                duration=40.0,
                summary={},
                best={},
            ),
        )
        source.finish()
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 130


@sync
async def test_ctrl_c_stops_at_once_and_a_second_one_ends_the_process():
    ctl = RecordingController()
    killed = []
    app = make_app(controller=ctl, hard_exit=lambda a: killed.append(a))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")  # even with the question open
        await pilot.press("ctrl+c")
        assert ctl.calls == [("stop", "dashboard", "ctrl+c")]
        assert not isinstance(app.screen, ConfirmScreen)
        assert killed == []
        await pilot.press("ctrl+c")
        assert killed == [app]
        assert len(ctl.calls) == 1


@sync
async def test_help_screen_lists_the_keys_and_any_key_closes_it():
    app = make_app(controller=RecordingController())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = shown(app.screen.query_one("#help-keys", Static))
        assert "Ctrl+C" in keys and "write a checkpoint now" in keys
        await pilot.press("x")
        assert not isinstance(app.screen, HelpScreen)


# --- the end of training ----------------------------------------------------------------------


def footer_keys(app) -> set[str]:
    """What the footer lists: the bindings shown and not turned off by the app's check_action."""
    return {b.binding.description for b in app.screen.active_bindings.values() if b.binding.show}


@sync
async def test_summary_screen_after_training_completes_and_q_leaves():
    ctl = RecordingController()
    events = recorded_run(epochs=3, end="completed")
    source = ReplaySource(events, exit_code=0)
    app = make_app(events, controller=ctl, source=source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert not isinstance(app.screen, ResultScreen)  # training thread still running
        assert {"Stop now", "Pause", "Checkpoint"} <= footer_keys(app) and "Leave" not in footer_keys(app)
        source.finish()
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        screen = app.screen
        assert screen.title_text == "Training completed"
        assert "train  loss" in screen.body_text and "valid  loss" in screen.body_text
        assert "|" not in screen.body_text  # a table, not Markdown (issue 51)
        assert "best checkpoint: runs/spirals/20240101-000000/checkpoint/epoch-2.pt" in screen.body_text
        assert "exit code 0" in screen.body_text
        await pilot.press("c")  # steering keys are off now: nothing reaches the controller
        await pilot.press("escape")
        assert not isinstance(app.screen, ResultScreen)
        await pilot.press("c", "p")
        assert ctl.calls == []
        # the footer and the buttons say so: Ctrl+C leaves, c and p are gone
        assert "Leave" in footer_keys(app) and not {"Stop now", "Pause", "Checkpoint"} & footer_keys(app)
        assert not app.query_one(ControlBar).display
        assert "training completed · r: the summary again" in str(app.query_one("#notice", Static).render())
        await pilot.press("r")
        assert isinstance(app.screen, ResultScreen)
        await pilot.press("q")  # no question once training ended
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 0


@sync
async def test_error_screen_shows_the_traceback():
    events = recorded_run(epochs=1, end="failed")
    source = ReplaySource(events, exit_code=1, wait=False)
    app = make_app(events, controller=RecordingController(), source=source)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        screen = app.screen
        assert screen.title_text == "Training failed: ValueError: bad shape (3, 4)"
        assert 'File "spirals.py", line 12' in screen.body_text
        assert screen.query_one("#result-box").has_class("-failed")
        assert app.query_one(ProgressPanel).status == "failed"
        await pilot.press("ctrl+c")  # after the end, Ctrl+C just leaves
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 1


@sync
async def test_an_exception_escaping_the_run_is_shown_as_a_failure():
    class Exploding:
        interrupter = Interrupter()
        run_dir = "runs/exploding"

        def subscribe(self, cb, step_events=True):
            self.cb = cb

        def execute(self):
            raise RuntimeError("core bug")

    run = Exploding()
    live = LiveRun(run)  # as `run_live` drives it
    app = LiveApp(live, None, clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        assert "RuntimeError: core bug" in app.screen.title_text
        assert "Traceback" in app.screen.body_text
        assert app.exit_code == 1


# --- a fake run, as run_live drives it (`LiveRun` and `LiveApp`, tuitrain/dashboard/live.py) ---------


class FakeRun:
    """What run_live needs: run_dir, interrupter, subscribe(cb, step_events), execute() -> exit code."""

    def __init__(self, events, wait_for_stop=False):
        self.events = events
        self.wait_for_stop = wait_for_stop
        self.interrupter = Interrupter()
        self.callbacks = []
        self.run_dir = "runs/fake"

    def subscribe(self, callback, step_events=True):
        self.callbacks.append(callback)

    def execute(self) -> int:
        for e in self.events:
            for cb in self.callbacks:
                cb(e, None)
        if not self.wait_for_stop:
            return 0
        while not self.interrupter.stop_requested:
            threading.Event().wait(0.01)
        stop = RunFinished(
            status="interrupted", exit_code=130, epoch=1, step=20, reason="stopped", duration=1.0, summary={}, best={}
        )
        for cb in self.callbacks:
            cb(stop, None)
        return 130


@sync
async def test_fake_run_completes_under_the_dashboard():
    run = FakeRun(recorded_run(epochs=2, end="completed"))
    live = LiveRun(run)
    app = LiveApp(live, None, clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        assert app.exit_code == 0 and app.state.step == 40
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 0
    assert live.finish(app, None) == 0 and not live.screen_gone  # what `run_live` returns


@sync
async def test_fake_run_stopped_with_ctrl_c_returns_130():
    run = FakeRun(recorded_run(epochs=1, end="running"), wait_for_stop=True)
    live = LiveRun(run)
    app = LiveApp(live, None, clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step == 20)
        await pilot.press("ctrl+c")
        assert run.interrupter.stop_requested and run.interrupter.stop_source == "dashboard"
        await until(pilot, lambda: not app.is_running)  # leaves once the graceful stop is done
    assert app.return_value == 130 and app.exit_code == 130
    assert live.finish(app, None) == 130


@sync
async def test_a_failing_screen_ends_itself_quietly_and_training_goes_on(capsys):
    """An error in the live dashboard ends the screen (exit code 1) with no traceback printed over the
    console lines; `LiveRun` keeps the error for experiment.log, and closing the failed screen does
    not stop training, which goes on until it is stopped."""
    run = FakeRun(recorded_run(epochs=1, end="running"), wait_for_stop=True)
    live = LiveRun(run)
    app = LiveApp(live, None, clock=lambda: T0)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.state.step == 20)
            app.call_later(lambda: 1 / 0)  # a handler that fails
            for _ in range(1200):  # not the pilot's pause: it waits for messages that a closed app never takes
                if not app.is_running:
                    break
                await asyncio.sleep(0.05)
        assert live.screen_gone and isinstance(live.screen_error, ZeroDivisionError)
        assert app.return_code == 1 and not run.interrupter.stop_requested
        err = capsys.readouterr().err
        assert "Traceback" not in err and "ZeroDivisionError" not in err
        assert live.thread.is_alive()  # training goes on without the screen
    finally:
        run.interrupter.request_stop("test")  # the run's thread never outlives the test
    assert live.finish(app, None) == 130


# --- watching a run directory ---------------------------------------------------------------


@sync
async def test_watching_a_finished_run_from_its_files(tmp_path):
    write_jsonl(tmp_path / "events.jsonl", recorded_run(epochs=3, end="completed"))
    app = DashboardApp(FileSource(tmp_path, poll=0.02), None, watch=True, notice="finished run", clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        # the charts are mounted as their metrics arrive, and drawn once mounted
        await until(pilot, lambda: "train" in loss_chart(app).points)
        assert app.state.step == 60 and len(loss_chart(app).points["train"][0]) == 60
        await pilot.press("escape", "c")
        assert app.is_running  # steering keys only warn
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 0


@sync
async def test_watching_a_live_run_steers_it_through_the_controller(tmp_path):
    events = recorded_run(epochs=1, total_epochs=3, end="running")
    path = write_jsonl(tmp_path / "events.jsonl", events)
    ctl = RecordingController()
    app = DashboardApp(FileSource(tmp_path, poll=0.02), ctl, watch=True, clock=lambda: T0)
    # no run.json here: its status is unknown, so the dashboard keeps steering it
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step == 20)
        with open(path, "a") as f:
            for e in recorded_run(epochs=2, total_epochs=3, end="running")[len(events) :]:
                if e.persistent:
                    f.write(e.to_json() + "\n")
        await until(pilot, lambda: app.state.step == 40)
        await pilot.press("c", "p")
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen) and app.screen.offer_leave
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running)
    assert ctl.calls == [("checkpoint", "dashboard"), ("pause", "dashboard"), ("stop", "dashboard", "quit")]


@sync
async def test_a_viewer_that_owns_its_run_stops_it_on_ctrl_c_and_leaves_once_it_ended(tmp_path):
    """`Monitor`'s viewer (`tuitrain watch --owned`): the loop has no other screen, so Ctrl+C stops it
    (not only the viewer), q offers no "leave", and the viewer goes once the run's last event came."""
    events = recorded_run(epochs=1, total_epochs=3, end="running")
    path = write_jsonl(tmp_path / "events.jsonl", events)
    ctl = RecordingController()
    app = DashboardApp(FileSource(tmp_path, poll=0.02), ctl, watch=True, owned=True, clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step == 20)
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen) and not app.screen.offer_leave
        await pilot.press("n")
        await pilot.press("ctrl+c")
        await until(pilot, lambda: ctl.calls == [("stop", "dashboard", "ctrl+c")])
        await pilot.pause(0.3)
        assert app.is_running and "leaving when stopped" in shown(app.query_one(ProgressPanel))
        with open(path, "a") as f:  # the loop saw the stop and ended
            f.write(
                RunFinished(
                    status="interrupted",
                    exit_code=130,
                    epoch=1,
                    step=20,
                    reason="stopped",
                    duration=1.0,
                    summary={},
                    best={},
                ).to_json()
                + "\n"
            )
        await until(pilot, lambda: not app.is_running)


@sync
async def test_watching_a_killed_run_says_so_and_stops_steering(tmp_path):
    import json
    import subprocess
    import sys

    write_jsonl(tmp_path / "events.jsonl", recorded_run(epochs=1, total_epochs=3, end="running"))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "run.json").write_text(json.dumps({"status": "running", "pid": gone.pid}))
    ctl = RecordingController()
    app = DashboardApp(FileSource(tmp_path, poll=0.02), ctl, watch=True, clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.final == "killed")
        assert app.controller is None and "process is gone" in shown(app.query_one("#notice"))
        assert app.query_one(ProgressPanel).status == "killed"
        await pilot.press("c", "q")  # nothing to steer; q leaves without asking
        await until(pilot, lambda: not app.is_running)
    assert ctl.calls == []


# --- small terminals -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (40, 10), (20, 5)])
@sync
async def test_small_terminals_do_not_crash(size):
    app = make_app(controller=RecordingController())
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        too_small = size[0] < 50 or size[1] < 12
        assert app.dashboard.has_class("-too-small") == too_small
        assert app.query_one("#too-small").display == too_small
        assert app.dashboard.has_class("-compact")
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert not app.dashboard.has_class("-too-small") and not app.dashboard.has_class("-compact")
        assert app.query_one("#main").display


def test_run_live_returns_the_exit_code_without_a_terminal(monkeypatch):
    """run_live's plumbing, with App.run replaced by a headless run_test session."""
    from tuitrain.dashboard import app as app_module

    async def drive(self):
        async with self.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(self.screen, ResultScreen))
            await pilot.press("q")
            await until(pilot, lambda: not self.is_running)

    monkeypatch.setattr(app_module.DashboardApp, "run", lambda self: asyncio.run(drive(self)))
    run = FakeRun(recorded_run(epochs=1, end="completed"))
    from tuitrain.dashboard.entry import run_live

    assert run_live(run, None) == 0


@sync
async def test_many_epochs_draw_at_most_a_dozen_boundary_lines_six_columns_apart():
    events = recorded_run(epochs=40, steps_per_epoch=2, end="running")
    app = make_app(events)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        plot = loss_chart(app)
        assert 2 <= len(plot.boundaries) <= min(12, (plot.size.width - 10) // 6)
        assert set(plot.boundaries) <= set(app.state.epoch_steps)
        await pilot.press("enter")  # alone, full size: room for a dozen
        await until(pilot, lambda: len(plot.boundaries) > 6)
        assert len(plot.boundaries) <= 12


@sync
async def test_redraws_give_way_when_the_screen_takes_more_than_its_share_of_a_core():
    """The UI thread's CPU time over PACE_WINDOW sets `slow`: a screen that costs 4 times its
    share spreads its refreshes (up to MAX_SLOW times); paused (nothing to give way to) it goes back to 1."""
    from tuitrain.core.events import RunPaused
    from tuitrain.dashboard.state import pacing

    cpu = [0.0]
    now = [1000.0]  # the pace's clock, moved by the test (this machine can stall for a second)
    window = pacing.PACE_WINDOW
    events = recorded_run(epochs=1, total_epochs=3, end="running")
    source = ReplaySource(events)
    app = make_app(events, source=source, ui_share=0.025, cpu_clock=lambda: cpu[0], pace_clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.pacer.slow == 1.0
        app.pacer.started = True  # past the start-up window, which is not counted
        cpu[0] += 0.1 * window  # 10% of a core: 4x the share
        now[0] += window
        app.feed.dirty.add("progress")
        app.drain()
        assert app.pacer.slow == pytest.approx(2.0)  # at most doubles per window
        cpu[0] += 0.1 * window
        now[0] += window
        app.feed.dirty.add("progress")
        app.drain()
        assert app.pacer.slow == pytest.approx(pacing.MAX_SLOW)
        app.pacer.last_plot = now[0]  # the plot was just drawn
        plot = loss_chart(app)
        more = recorded_run(epochs=2, total_epochs=3, end="running")[len(events) :]
        source.push(*more)
        await until(pilot, lambda: app.state.step == 40)
        await pilot.pause()
        # counted once the new points are in: a relayout as they arrive may build the figure, while the
        # pace's clock has not moved (the pacing under test decides only the builds after this)
        before = plot.builds
        now[0] += 3.5  # more than plot_interval (1 s), less than plot_interval * slow: the new points wait
        cpu[0] += 0.1 * 3.5  # the screen still takes 4x its share
        await pilot.pause(0.3)
        assert plot.builds == before and app.pacer.slow == pytest.approx(pacing.MAX_SLOW)
        now[0] += app.pacer.plot_wait(plot_cost(app), False)
        await until(pilot, lambda: plot.builds > before)  # their turn came
        source.push(RunPaused(epoch=2, step=40))
        await until(pilot, lambda: app.state.paused)
        now[0] += window  # a quiet window while paused
        app.feed.dirty.add("progress")
        app.drain()
        assert app.pacer.slow == 1.0


@sync
async def test_the_screen_wakes_less_often_while_training_runs_and_at_once_when_paused():
    """While training runs in this process the drain timer fires every BUSY_DRAIN_INTERVAL (each
    wake takes the GIL from training); paused, it goes back to the quick interval."""
    from tuitrain.core.events import RunPaused, RunResumed
    from tuitrain.dashboard.state import pacing

    events = recorded_run(epochs=1, total_epochs=3, end="running")
    source = ReplaySource(events)
    app = make_app(events, source=source)
    drain_timers = []  # the intervals the drain timer was set to (Textual's public set_interval)
    set_interval = app.set_interval

    def recording(interval, callback=None, **kwargs):
        if kwargs.get("name") == "drain":
            drain_timers.append(interval)
        return set_interval(interval, callback, **kwargs)

    app.set_interval = recording
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.feed.every == pacing.BUSY_DRAIN_INTERVAL)
        timer = app.feed.timer
        assert timer is not None and drain_timers[-1] == pacing.BUSY_DRAIN_INTERVAL
        source.push(RunPaused(epoch=1, step=20))
        await until(pilot, lambda: app.state.paused)
        await until(pilot, lambda: app.feed.every == app.drain_interval)
        assert app.feed.timer is not timer and drain_timers[-1] == app.drain_interval
        source.push(RunResumed(epoch=1, step=20, paused_for=1.0))
        await until(pilot, lambda: app.feed.every == pacing.BUSY_DRAIN_INTERVAL)
        more = recorded_run(epochs=2, total_epochs=3, end="running")[len(events) :]
        source.push(*more)  # still drained, a quarter of a second apart
        await until(pilot, lambda: app.state.step == 40)


@sync
async def test_devices_panel_shows_one_row_per_rank_with_its_cpu_and_throughput():
    from dataclasses import replace

    from .fixtures import devices

    events = recorded_run(epochs=1, total_epochs=3, end="running")
    t = last_time(events)
    ranks = [
        replace(devices(t), rank=0, process_cpu=98.0, steps_per_s=50.0, items_per_s=1600.0, rss=300 * 2**20),
        replace(devices(t), rank=1, process_cpu=97.0, steps_per_s=50.0, items_per_s=15000.0, rss=280 * 2**20),
    ]
    app = make_app(events + ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = shown(app.query_one(DevicesPanel))
        r0 = next(line for line in text.splitlines() if "r0" in line)
        r1 = next(line for line in text.splitlines() if "r1" in line)
        assert "98%" in r0 and "1600/s" in r0 and "300" in r0
        assert "97%" in r1 and "15.0k/s" in r1
        assert "RSS" not in text  # each rank's memory is on its row
