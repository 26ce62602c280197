"""The dashboard's structure (issue 26 item 4, issue 43 item 4): `DashboardApp` holds the run's keys and delegates the
widgets to `DashboardScreen` and the chart keys to `ChartGrid`, whose keys still act wherever the focus
is on the dashboard, with the footer in its order."""

from __future__ import annotations

import time

from textual.app import App
from textual.widgets import Button

from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.screens.screen import DashboardScreen
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.charts.metric_plot import MetricPlot

from .test_app import RecordingController, make_app, sync, until
from .test_chart_keys import four_metrics, grid

CHART_KEYS = {
    "l",
    "s",
    "x",
    "w",
    "slash",
    "e",
    "i",
    "enter",
    "escape",
    "left",
    "right",
    "up",
    "down",
    "tab",
    "shift+tab",
    "pagedown",
    "pageup",
}
RUN_KEYS = {"c", "p", "q", "ctrl+c", "ctrl+z", "r", "question_mark", "R", "d", "P"}
# the footer as it was when every key was the app's
FOOTER = ["ctrl+c", "c", "p", "q", "l", "s", "x", "w", "slash", "e", "i", "question_mark"]


def test_the_chart_keys_are_the_grid_s_and_the_run_s_keys_the_app_s():
    app_keys = {b.key for b in DashboardApp.BINDINGS}
    assert app_keys == RUN_KEYS
    assert {b.key for b in ChartGrid.CHART_KEYS} == CHART_KEYS
    assert DashboardApp.compose is App.compose  # the screen composes the widgets


@sync
async def test_the_feed_works_from_what_it_is_given_and_tells_its_host_the_end_by_a_message():
    """`Feed` needs no `DashboardApp`: any Textual app as its host (timers, messages), a bridge, a
    source, a pacer, a screen and a state; it folds the events, shows them, and posts `Feed.Settled`
    once the run's end is in."""
    from tuitrain.dashboard.state.bridge import EventBridge
    from tuitrain.dashboard.state.feed import Feed
    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.dashboard.state.pacing import Pacer
    from tuitrain.sources.run_files import ReplaySource

    from .fixtures import T0, recorded_run

    settled = []

    class Host(App):
        def __init__(self) -> None:
            super().__init__()
            self.bridge = EventBridge()
            self.feed = Feed(
                self,
                self.bridge,
                ReplaySource(live=False),
                Pacer(0.0, 0.0),
                tick=self.tick,
                interval=1 / 15,
                watching=True,
                watching_label=True,
                note=lambda: "",
                pace_clock=time.monotonic,
                cpu_clock=time.thread_time,
            )

        def get_default_screen(self) -> DashboardScreen:
            return DashboardScreen(clock=lambda: T0)

        async def on_mount(self) -> None:
            await self.screen.composed.wait()
            self.feed.show_on(self.screen, DashboardState(clock=lambda: T0))
            self.feed.start()

        def tick(self) -> None:
            self.feed.drain()

        def on_feed_settled(self, message: Feed.Settled) -> None:
            settled.append(self.feed.state.final)

    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        for event in recorded_run(epochs=1, end="completed"):
            app.bridge(event, None)
        await until(pilot, lambda: settled)
        await pilot.pause()
        assert settled == ["completed"] and app.feed.state.step == 20
        assert app.screen.progress.status == "completed" and "loss" in app.screen.grid.charts


def test_a_live_run_is_the_app_s_source_and_controller_in_one():
    """`run_live`'s one way in: `LiveRun` is what the app reads from and steers; once the screen is
    gone, its closing no longer stops training and nothing more reaches it."""
    from tuitrain.core.control import Interrupter
    from tuitrain.dashboard.live import LiveApp, LiveRun

    class Run:
        run_dir = "runs/x"

        def __init__(self):
            self.interrupter = Interrupter()
            self.subscribed = []

        def subscribe(self, callback, steps=None):
            self.subscribed.append((callback, steps))

        def execute(self):
            return 0

    run = Run()
    live = LiveRun(run)
    app = LiveApp(live, None)
    assert app.source is live and app.controller is live
    seen = []

    def emit(event, state=None):
        seen.append(event)

    emit.step_events = "sampled"
    live.open(emit)
    callback, steps = run.subscribed[-1]
    assert steps == "sampled"
    callback("e1")
    live.toggle_pause("dashboard")
    assert run.interrupter.paused
    live.screen_failed(ZeroDivisionError("x"))
    callback("e2")
    live.request_stop("dashboard", "dashboard closed")
    assert seen == ["e1"] and not run.interrupter.stop_requested
    live.request_stop("dashboard", "quit")
    assert run.interrupter.stop_requested
    assert live.work() == 0 and live.done.is_set()


def footer(app) -> list[str]:
    return [key for key, active in app.screen.active_bindings.items() if active.binding.show]


@sync
async def test_the_screen_composes_and_the_chart_keys_act_wherever_the_focus_is():
    app = make_app(four_metrics(), controller=RecordingController())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4 and all(c.points for c in grid(app).charts.values()))
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen) and app.screen is app.dashboard
        loss = grid(app).charts["loss"]
        assert footer(app) == FOOTER  # no chart focused
        button = app.query_one("#button-pause", Button)
        button.focus()
        await pilot.pause()
        assert footer(app) == FOOTER
        await pilot.press("l")  # a button has the focus: l still acts on the first chart
        assert loss.log_scale
        await pilot.press("tab")
        assert app.focused is loss
        assert footer(app) == FOOTER  # a chart focused: the grid's keys sit in the chain before the app's
        await pilot.press("l", "right")
        assert not loss.log_scale and app.focused is grid(app).charts["accuracy"]
        await pilot.press("p")  # the run's keys are still the app's
        assert app.controller.calls == [("pause", "dashboard")]
        assert isinstance(app.focused, MetricPlot)


def test_no_module_imports_another_modules_private_names():
    """Issue 53: what a dashboard module shares is public (parallel.py drew with drawing.py's `_canvas` and
    `_strip`); `from x import _name` of a tuitrain module is a name to make public or move."""
    import ast
    from pathlib import Path

    import tuitrain

    root = Path(tuitrain.__file__).parent
    found = []
    for path in sorted((root / "dashboard").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("tuitrain")):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {', '.join(private)}")
    assert not found, found


def test_state_kind_tells_the_views_what_state_they_show():
    """Issue 53: the views ask `state.kind` ("run", "compare", "sweep"), never whether an attribute is there."""
    import re
    from pathlib import Path

    from tuitrain.dashboard.state.model import DashboardState

    assert DashboardState.kind == "run"
    dashboard = Path(DashboardState.__module__.replace(".", "/")).parents[1]
    root = Path(__file__).resolve().parents[2]
    probes = [
        f"{path.relative_to(root)}:{i}"
        for path in sorted((root / dashboard).rglob("*.py"))
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?<!`)(getattr|hasattr)\((self\.)?_?state, \"(runs|sweep|drawn_runs|shown_runs)\"", line)
    ]
    assert not probes, probes
