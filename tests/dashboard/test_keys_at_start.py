"""The chart keys right after the dashboard opens, before any Tab (SPEC "Dashboard": they act on the
focused chart, or on the first chart when none has the focus). Two openings: a finished run watched
from its files (`tuitrain watch RUN_DIR`: the summary is up over the charts, and a chart key takes the
user back to them and acts there), and a live run (no summary, nothing focused)."""

from __future__ import annotations

import pytest

from tuitrain.dashboard.app import DashboardApp
from tuitrain.sources.run_files import FileSource
from tuitrain.dashboard.charts.metric_plot import MetricPlot
from tuitrain.dashboard.screens.result_screen import ResultScreen

from .fixtures import T0, recorded_run, write_jsonl
from .test_app import RecordingController, make_app, shown, sync, until
from .test_chart_keys import four_metrics, grid

OPENINGS = ["watched-finished", "live"]


def opened(how: str, tmp_path) -> DashboardApp:
    if how == "watched-finished":
        events = four_metrics(run_dir=str(tmp_path)) + recorded_run(epochs=1)[-1:]  # its RunFinished
        write_jsonl(tmp_path / "events.jsonl", events)
        return DashboardApp(
            FileSource(tmp_path, poll=0.02),
            None,
            watch=True,
            clock=lambda: T0 + 60,
            notice="finished run: keys that steer are off",
        )
    return make_app(four_metrics(run_dir=str(tmp_path)), controller=RecordingController())


async def at_start(app, pilot, how: str) -> MetricPlot:
    """Opened and filled, as the user first sees it; no key pressed yet. The first chart."""
    await until(pilot, lambda: len(grid(app).charts) == 4 and all(c.points for c in grid(app).charts.values()))
    if how == "watched-finished":
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))  # the summary, over the charts
    await pilot.pause()
    assert not isinstance(app.focused, MetricPlot)  # nothing focused: no Tab was pressed
    first = grid(app).visible()[0]
    assert first.chart == "loss"
    return first


@pytest.mark.parametrize("how", OPENINGS)
@sync
async def test_i_at_once_shows_the_cursor_and_its_step_on_the_first_chart(how, tmp_path):
    app = opened(how, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        first = await at_start(app, pilot, how)
        await pilot.press("i")
        await until(pilot, lambda: first.inspecting)
        await pilot.pause()
        assert not isinstance(app.screen, ResultScreen)
        assert app.focused is first and first.cursor == 40  # the newest step
        assert grid(app).inspected() is first
        screen = shown(first)
        assert "step 40" in screen  # the readout
        canvas = [line[1:-1] for line in screen.split("\n")[1:-1]]
        column = first.drawn.left + first.drawn.x.cell(40)
        assert sum(row[column] == "┃" for row in canvas) >= 3  # the cursor's line


@pytest.mark.parametrize("how", OPENINGS)
@sync
async def test_enter_at_once_shows_the_first_chart_alone_full_size(how, tmp_path):
    app = opened(how, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        first = await at_start(app, pilot, how)
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.maximized is first)
        await pilot.pause()
        assert first.region.width == 120 and first.region.height >= 36
        await pilot.press("enter")  # back to the grid
        await until(pilot, lambda: app.screen.maximized is None)


@pytest.mark.parametrize("how", OPENINGS)
@pytest.mark.parametrize(
    "key, tool, before, after",
    [
        ("s", "smoothing", 0.0, 0.6),
        ("x", "x_axis", "step", "epoch"),
        ("w", "window", "full", "recent"),
        ("l", "log_scale", False, True),
    ],
)
@sync
async def test_a_reading_tool_at_once_changes_the_first_chart_only(how, key, tool, before, after, tmp_path):
    app = opened(how, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        first = await at_start(app, pilot, how)
        others = [c for c in grid(app).charts.values() if c is not first]
        await pilot.press(key)
        await until(pilot, lambda: getattr(first, tool) == after)
        assert not isinstance(app.screen, ResultScreen)
        assert all(getattr(c, tool) == before for c in others)


@pytest.mark.parametrize("how", OPENINGS)
@sync
async def test_e_at_once_exports(how, tmp_path):
    app = opened(how, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await at_start(app, pilot, how)
        await pilot.press("e")
        await until(pilot, lambda: app.last_export is not None)
        assert app.last_export.parent == tmp_path / "exports"
        assert (app.last_export / "train-step-loss.csv").exists()


@sync
async def test_the_summary_still_leaves_with_esc_and_q(tmp_path):
    app = opened("watched-finished", tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await at_start(app, pilot, "watched-finished")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ResultScreen))
        assert not any(c.inspecting or c.log_scale for c in grid(app).charts.values())
        await pilot.press("r")  # the summary again; i from it inspects the first chart
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        await pilot.press("i")
        await until(pilot, lambda: grid(app).charts["loss"].inspecting)
        await pilot.press("r", "q")
        await until(pilot, lambda: not app.is_running)
