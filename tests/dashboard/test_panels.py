"""The progress panel's data-wait row and the result screen for failures that one line explains
(a full disk, out of memory) and for a spent max_time."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tuitrain.core.events import MetricsLogged, RunFailed, RunFinished
from tuitrain.sources.run_files import ReplaySource
from tuitrain.dashboard.panels.progress_panel import ProgressPanel
from tuitrain.dashboard.screens.result_screen import ResultScreen

from .fixtures import recorded_run
from .test_app import SIZE, last_time, make_app, shown, sync, until


def _with_data_wait(events, wait):
    out = []
    for e in events:
        if isinstance(e, MetricsLogged) and e.split == "train":
            e = dataclasses.replace(e, metrics={**e.metrics, "data_wait": wait})
        out.append(e)
    return out


@sync
async def test_the_panel_shows_the_share_of_time_spent_waiting_for_data():
    app = make_app(_with_data_wait(recorded_run(epochs=2, total_epochs=4, end="running"), 0.45))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "waits 45%" in shown(app.query_one(ProgressPanel)))
        assert "slow loader" in shown(app.query_one(ProgressPanel))  # whole: "of the time" gives way
    app = make_app(_with_data_wait(recorded_run(epochs=2, total_epochs=4, end="running"), 0.02))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "waits 2% of the time" in shown(app.query_one(ProgressPanel)))
        assert "slow loader" not in shown(app.query_one(ProgressPanel))
    app = make_app(recorded_run(epochs=2, total_epochs=4, end="running"))  # not measured: no row
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "Speed" in shown(app.query_one(ProgressPanel)))
        assert "waits" not in shown(app.query_one(ProgressPanel))


@sync
async def test_a_full_disk_ends_on_one_line_and_the_last_checkpoint_not_a_traceback():
    events = recorded_run(epochs=2, end="failed")
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    line = (
        "cannot write runs/spirals/20240101-000000/checkpoint/epoch-0003.pt: No space left on device "
        "(errno 28); the run stops"
    )
    events[-1] = dataclasses.replace(
        failed,
        error=line,
        cause="write_failed",
        checkpoint="runs/spirals/20240101-000000/checkpoint/epoch-0002.pt",
        traceback="Traceback (most recent call last):\n  OSError: [Errno 28]",
    )
    app = make_app(events, source=ReplaySource(events, exit_code=1, wait=False))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        body = app.screen.body_text
        assert "last complete checkpoint: runs/spirals/20240101-000000/checkpoint/epoch-0002.pt" in body
        assert "No space left on device" in app.screen.title_text + body
        assert "Traceback" not in body and "experiment.log" in body


@sync
async def test_a_spent_max_time_is_named_on_the_result_screen():
    events = recorded_run(epochs=2)
    assert isinstance(events[-1], RunFinished)
    events[-1] = dataclasses.replace(events[-1], reason="max_time")
    app = make_app(events, source=ReplaySource(events, exit_code=0, wait=False))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        assert app.screen.title_text == "Training completed"
        assert app.screen.body_text.startswith("max_time spent")


@pytest.mark.parametrize("end", ["running", "completed"])
@sync
async def test_the_clock_redraws_a_live_runs_panel_each_second_and_an_ended_runs_never(end):
    """The clock asks the progress panel to show the run each second: a live run's time moves, an ended run's
    panel is what it was and is not drawn again (under the summary dialog that would draw the whole dimmed
    dashboard again, each second)."""
    events = recorded_run(epochs=2, total_epochs=4, end=end)
    began = time.monotonic()
    app = make_app(events, clock=lambda: last_time(events) + 30 + (time.monotonic() - began))
    async with app.run_test(size=SIZE) as pilot:
        panel = app.query_one(ProgressPanel)
        await until(pilot, lambda: "Time" in shown(panel) and app.state.ended == (end != "running"))
        await pilot.pause(1.2)  # a tick of the clock: the panel shown at its laid-out width
        updates = []
        update = panel.update
        panel.update = lambda *a, **k: (updates.append(1), update(*a, **k))[1]
        await pilot.pause(2.3)  # two ticks of the clock, at least
        if end == "running":
            assert len(updates) >= 2
        else:
            assert not updates
