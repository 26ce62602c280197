"""A resumed run on the dashboard: one run of several sessions in one events.jsonl (several
RunStarted). The live dashboard first reads the past sessions from the run directory, then this
session's events; every view shows the run's whole history from its first step, and its time is
training time: the gaps between sessions are closed up (elapsed, the wall-time x axis), speed and
ETA are the current session's."""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import read_events, wait_for
from tuitrain.core.control import Interrupter
from tuitrain.core.events import AlertRaised, MetricsLogged, RunFinished, RunStarted, StepCompleted
from tuitrain.dashboard.live import LiveApp, LiveRun
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.sources.run_files import FileSource
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.screens.result_screen import ResultScreen
from tuitrain.run.runner import prepare_run

from .fixtures import T0, write_jsonl
from .test_app import SIZE, sync, until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GAP = 3600.0  # an hour between the sessions
SPE = 10  # steps per epoch


def session(
    first: int,
    last: int,
    t: float,
    epochs: int,
    end: bool = True,
    step_events: bool = False,
    alert_at: int | None = None,
) -> list:
    """One session's events: steps first..last, a second apart from `t`; its RunFinished unless `end` is False."""
    ev = [
        RunStarted(
            run_dir="runs/x/1",
            experiment="x",
            epochs=epochs,
            max_steps=0,
            steps_per_epoch=SPE,
            batch_size=8,
            start_epoch=(first - 1) // SPE + 1,
            start_step=first - 1,
            resumed_from="checkpoint/a.pt" if first > 1 else "",
            time=t,
        )
    ]
    for step in range(first, last + 1):
        t += 1.0
        epoch = (step - 1) // SPE + 1
        if step_events:
            ev.append(StepCompleted(phase="train", epoch=epoch, step=step, batch=(step - 1) % SPE, items=8, time=t))
        ev.append(
            MetricsLogged(
                split="train",
                epoch=epoch,
                step=step,
                batch=(step - 1) % SPE + 1,
                batches=SPE,
                metrics={"loss": 1.0 / step},
                time=t,
            )
        )
        if step == alert_at:
            ev.append(
                AlertRaised(
                    rule="loss_spike",
                    level="warning",
                    title=f"spike at {step}",
                    text="x",
                    step=step,
                    episode=step,
                    time=t,
                )
            )
    if end:
        ev.append(
            RunFinished(
                status="completed",
                exit_code=0,
                epoch=(last - 1) // SPE + 1,
                step=last,
                reason="epochs",
                duration=float(last - first + 1),
                summary={},
                best={},
                time=t,
            )
        )
    return ev


def two_sessions(end: bool = True) -> list:
    """Steps 1-20 (20 s), an hour's gap, then steps 21-30 (10 s)."""
    first = session(1, 20, T0, epochs=2)
    return first + session(21, 30, first[-1].time + GAP, epochs=3, end=end)


def test_the_time_of_a_resumed_run_is_its_training_time_not_the_gap_between_sessions():
    st = DashboardState(clock=lambda: T0 + 1e6)
    st.apply(two_sessions())
    assert st.elapsed() == pytest.approx(30.0)  # 20 s + 10 s, not the hour between
    assert st.sessions == 2 and st.final == "completed" and st.finished.step == 30
    xs, _ = st.series[("train", "step", "loss")].points()
    assert xs[0] == 1 and xs[-1] == 30
    # the wall-time axis: the gap closed up, the second session goes on where the first one stopped
    assert st.axes["time"](20) == pytest.approx(20.0) and st.axes["time"](21) == pytest.approx(21.0)
    assert st.axes["time"](30) == pytest.approx(30.0)


def test_an_earlier_session_s_end_is_undone_by_the_next_and_speed_is_the_current_session_s():
    now = [T0]
    st = DashboardState(clock=lambda: now[0])
    events = two_sessions(end=False)
    st.apply(events)
    now[0] = events[-1].time + 2.0
    assert not st.ended and st.status == "running" and st.finished is None
    assert st.elapsed() == pytest.approx(32.0)
    _, steps_per_s = st.rates()
    assert steps_per_s == pytest.approx(1.0)  # a step a second, not 10 steps over the hour and more
    assert st.eta() == pytest.approx(0.0)  # step 30 of 3 epochs of 10: done but for its end
    # right after a resume, before its warm-up, no speed is claimed from the last session's
    st2 = DashboardState(clock=lambda: now[0])
    st2.apply(events[:-8])
    assert st2.rates() == (None, None) and st2.eta() is None


def test_watch_reads_a_two_session_run_with_its_training_time(tmp_path):
    events = two_sessions()
    write_jsonl(tmp_path / "events.jsonl", events)
    st = DashboardState(clock=lambda: T0 + 1e6)
    src = FileSource(tmp_path, poll=0.02)
    src.open(lambda e, s: st.apply([e]))
    worker = threading.Thread(target=src.work, daemon=True)
    worker.start()
    wait_for(lambda: src.caught_up, timeout=10, what="the source to read the file")
    src.close()
    worker.join(2)
    assert st.elapsed() == pytest.approx(30.0)
    assert st.axes["time"](30) == pytest.approx(30.0)
    assert st.sessions == 2 and st.final == "completed"


def test_a_file_source_told_where_to_stop_reads_that_far_and_returns(tmp_path):
    events = two_sessions()
    path = write_jsonl(tmp_path / "events.jsonl", events[:15])
    size = path.stat().st_size
    with open(path, "a") as f:  # what a new session writes after the screen opened
        f.write(events[15].to_json() + "\n")
    got = []
    src = FileSource(tmp_path, until=size)
    src.open(lambda e, s: got.extend(e.events()) if hasattr(e, "events") else got.append(e))
    assert src.work() is None and src.caught_up
    assert got == events[:15]


# --- the live dashboard of a resumed run -----------------------------------------------------------


class ResumedRun:
    """What run_live drives, in a run directory that holds an earlier session: this session's events."""

    def __init__(self, run_dir, events, code: int = 0):
        self.run_dir, self.events, self.code = run_dir, events, code
        self.built = threading.Event()  # set: this session has built the user's parts and starts
        self.interrupter = Interrupter()
        self.callbacks = []

    def subscribe(self, callback, step_events=True):
        self.callbacks.append(callback)

    def execute(self) -> int:
        self.built.wait(30)
        for e in self.events:
            for cb in self.callbacks:
                cb(e, None)
        return self.code


@sync
async def test_the_live_dashboard_shows_the_past_sessions_first_and_rings_only_for_this_one(tmp_path):
    first = session(1, 20, T0, epochs=3, alert_at=5)
    write_jsonl(tmp_path / "events.jsonl", first)
    now = first[-1].time + GAP
    run = ResumedRun(tmp_path, session(21, 30, now, epochs=3, step_events=True, alert_at=25))
    app = LiveApp(LiveRun(run), None)
    app.state.clock = lambda: now + 10
    bells = []
    app.bell = lambda: bells.append(app.state.step)
    async with app.run_test(size=SIZE) as pilot:
        # the past read, this session still building: neither the last session's end nor its clock
        await until(pilot, lambda: app.state.status == "starting" and app.state.sessions == 1)
        assert not app.state.ended and app.state.elapsed() == pytest.approx(20.0)
        assert not isinstance(app.screen, ResultScreen)
        run.built.set()
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        xs, _ = app.state.series[("train", "step", "loss")].points()
        assert xs == list(range(1, 31))  # the past session first, then this one's steps, in order
        assert app.state.elapsed() == pytest.approx(30.0) and app.state.sessions == 2
        assert len(bells) == 1  # the live alert's, not the one read back from the first session
        assert "0:00:30 in 2 sessions (this one 0:00:10)" in app.screen.body_text
        await pilot.press("escape")
        chart = app.query_one(ChartGrid).charts["loss"]
        await until(pilot, lambda: chart.points.get("train"))
        assert chart.points["train"][0][0] == 1 and chart.points["train"][0][-1] == 30


@pytest.fixture
def first_session(tiny, forget_tinyproj):
    """The tiny project trained for 2 epochs (14 steps, a checkpoint each epoch), then a pause."""
    run = prepare_run(tiny.config, ["train.epochs=2"], headless=True)
    assert run.execute() == 0
    time.sleep(1.0)  # the gap between the sessions
    return tiny, run.run_dir


def _training_time(run_dir) -> float:
    """Each session's RunStarted to its RunFinished, from events.jsonl."""
    total, start = 0.0, None
    for e in read_events(run_dir):
        if e["event"] == "RunStarted":
            start = e["time"]
        elif e["event"] == "RunFinished":
            total += e["time"] - start
    return total


@sync
async def test_a_resumed_run_s_live_dashboard_shows_its_history_from_step_1(first_session):
    tiny, run_dir = first_session
    run = prepare_run(tiny.config, ["train.epochs=4"], resume="latest", headless=False)
    assert run.run_dir == run_dir
    app = LiveApp(LiveRun(run), None)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        st = app.state
        xs, _ = st.series[("train", "step", "loss")].points()
        assert xs[0] == 1 and xs[-1] == 28 and xs == sorted(xs)  # both sessions' steps
        assert st.elapsed() == pytest.approx(_training_time(run_dir), abs=0.01)  # the second between left out
        assert st.sessions == 2 and st.final == "completed"
        assert "in 2 sessions" in app.screen.body_text
        await pilot.press("escape")
        chart = app.query_one(ChartGrid).charts["loss"]
        await until(pilot, lambda: chart.points.get("train"))
        assert chart.points["train"][0][0] == 1
        await pilot.press("q")  # the run has ended: q leaves
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 0


@sync
async def test_resuming_a_completed_run_with_nothing_left_shows_its_charts_and_summary(first_session):
    tiny, run_dir = first_session
    run = prepare_run(tiny.config, ["train.epochs=2"], resume="latest", headless=False)
    app = LiveApp(LiveRun(run), None)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        assert "Training completed" in app.screen.title_text
        xs, _ = app.state.series[("train", "step", "loss")].points()
        assert xs[0] == 1 and xs[-1] == 14
        assert app.state.elapsed() == pytest.approx(_training_time(run_dir), abs=0.01)
        await pilot.press("escape")
        chart = app.query_one(ChartGrid).charts["loss"]
        await until(pilot, lambda: chart.points.get("train"))
        assert chart.points["train"][0][0] == 1 and chart.points["train"][0][-1] == 14
