"""Real training (the runner, a real Learner, real files) under the dashboard, stopped by keys: the
run as `run_live` drives it (`LiveRun`, `LiveApp`)."""

from __future__ import annotations

import json

import pytest

from tuitrain.core.checkpoint import read_index
from tuitrain.dashboard.live import LiveApp, LiveRun
from tuitrain.dashboard.screens.confirm_screen import ConfirmScreen
from tuitrain.dashboard.charts.metric_plot import MetricPlot
from tuitrain.run.runner import prepare_run

from .test_app import SIZE, sync, until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def live_run(tiny, forget_tinyproj):
    """The tiny project, slowed so that it is still training when the keys come."""
    run = prepare_run(tiny.config, ["train.epochs=50", "model.sleep=0.01"], headless=False)
    return tiny, run


def _finished(run) -> dict:
    return json.loads((run.run_dir / "run.json").read_text())


@sync
async def test_q_then_y_stops_real_training_gracefully_and_leaves(live_run):
    tiny, run = live_run
    live = LiveRun(run)
    app = LiveApp(live, None)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step >= 5)
        assert app.query(MetricPlot)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert not run.interrupter.stop_requested  # only asked, not yet stopped
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 130 and live.finish(app, None) == 130
    info = _finished(run)
    assert info["status"] == "interrupted" and info["exit_code"] == 130
    entries = read_index(run.run_dir / "checkpoint")
    assert entries and max(e.step for e in entries) == info["step"]  # the graceful stop saved its step
    assert 5 <= info["step"] < 50 * 7


@sync
async def test_ctrl_c_stops_real_training_at_once(live_run):
    tiny, run = live_run
    live = LiveRun(run)
    app = LiveApp(live, None)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step >= 3)
        await pilot.press("ctrl+c")
        assert run.interrupter.stop_requested
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == 130 and live.finish(app, None) == 130
    assert _finished(run)["status"] == "interrupted"
    assert (run.run_dir / "model.pt").exists()
