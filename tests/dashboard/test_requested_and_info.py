"""The dashboard shows a checkpoint asked for with its mark (and the legend under the panel), and a
script's "info" alert in the header and the output panel without the alarm (no red header, no bell)."""

from __future__ import annotations

from textual.widgets import Static

from tuitrain.core.events import AlertRaised, CheckpointSaved
from tuitrain.dashboard.panels.checkpoint_list import LEGEND, REQUESTED, CheckpointList
from tuitrain.dashboard.panels.output_log import OutputLog

from .fixtures import last_time, recorded_run
from .test_app import SIZE, make_app, shown, sync


def run_with(*more):
    events = recorded_run(epochs=3, total_epochs=5, end="running")
    t = last_time(events)
    return events + [e.__class__(**{**{f: getattr(e, f) for f in e.__slots__}, "time": t + 1}) for e in more]


@sync
async def test_a_checkpoint_asked_for_is_marked_in_the_panel():
    asked = CheckpointSaved(
        file="checkpoint/epoch-0003-step-00000055.pt",
        epoch=3,
        step=55,
        metrics={},
        bytes=1000,
        best=False,
        reason="request",
        stall=0.0,
        write=0.1,
        requested="dashboard",
    )
    app = make_app(run_with(asked))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        panel = app.query_one(CheckpointList)
        assert [bool(r["requested"]) for r in panel.rows] == [True, False, False]
        lines = shown(panel).splitlines()
        # the side column is narrow: each row's numbers (and marks), its file name on the next line
        at = next(i for i, line in enumerate(lines) if "epoch-0003-step-00000055.pt" in line)
        assert lines[at - 1].lstrip("│ ").startswith(REQUESTED)
        assert sum(REQUESTED in line for line in lines[:-1]) == 1  # that row alone (the legend aside)
        assert LEGEND in lines[-1]


@sync
async def test_an_info_alert_is_shown_without_the_alarm():
    info = AlertRaised(rule="user", level="info", title="halfway", text="half the steps are done", step=30)
    app = make_app(run_with(info))
    rings = []
    app.bell = lambda: rings.append(1)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        bar = app.query_one("#title-bar", Static)
        assert "halfway" in shown(bar) and "alert" not in shown(bar)
        assert not bar.has_class("-alerting") and not rings
        assert app.state.alerts == [] and [a.title for a in app.state.infos] == ["halfway"]
        assert app.query_one(OutputLog).count >= 1
        assert any("[info] step 30: halfway" in text for _, text, _ in app.state.lines) or "halfway" in shown(
            app.query_one(OutputLog)
        )
