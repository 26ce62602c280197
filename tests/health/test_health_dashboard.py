"""Alerts on the dashboard (SPEC "Dashboard", "Health"): the header's colour and count, a mark on the
charts at the alert's step, the alert in the output panel."""

from __future__ import annotations

from tests.dashboard.fixtures import recorded_run
from tests.dashboard.test_app import make_app, sync, until
from tuitrain.core.events import AlertRaised
from tuitrain.dashboard.widgets.chart_grid import ChartGrid


@sync
async def test_an_alert_colours_the_header_marks_the_charts_and_is_listed():
    events = recorded_run(epochs=3, total_epochs=5, end="running")
    events.append(AlertRaised(rule="loss_spike", level="warning", title="loss spike at step 30",
                              text="loss 9.1 at step 30 is above 2.0", step=30, value=9.1, action="skip"))
    app = make_app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: app.state.alerts and grid.charts["loss"].alert_marks)
        await pilot.pause()
        bar = app.query_one("#title-bar")
        assert bar.has_class("-alerting")
        assert "1 alert: loss spike at step 30" in str(bar.render())
        assert grid.charts["loss"].alert_marks == [30]
        top = grid.charts["loss"].drawn.lines[grid.charts["loss"].drawn.top].text
        assert "▼" in top
        log = app.query_one("#log")
        await until(pilot, lambda: "loss spike at step 30" in "\n".join(str(x) for x in getattr(log, "lines", [])))
