"""Alerts counted by episode (SPEC "Health": the header and the chart marks count episodes, not raw
values): a rule that acts raises an alert per spike, all of one episode; the header says one alert,
the charts mark the episode once, at its first step; every alert stays listed in the output panel."""

from __future__ import annotations

from tuitrain.core.events import AlertRaised
from tuitrain.dashboard.state.changes import Alerts, NewEpisode
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.dashboard.charts.chart_grid import ChartGrid

from .fixtures import recorded_run
from .test_app import make_app, shown, sync, until


def skips(first: int, n: int, episode: int, rule: str = "loss_spike") -> list[AlertRaised]:
    """A rule that skips: an alert for each of n spikes in a row, one episode."""
    return [
        AlertRaised(
            rule=rule,
            level="warning",
            title=f"loss spike at step {s}",
            text=f"loss 9.1 at step {s}",
            step=s,
            value=9.1,
            action="skip",
            episode=episode,
        )
        for s in range(first, first + n)
    ]


def test_five_alerts_of_one_episode_are_one_episode_marked_at_its_first_step():
    state = DashboardState()
    changed = [state.apply([a]) for a in skips(30, 5, episode=1)]
    assert len(state.alerts) == 5 and len(state.episodes) == 1
    assert state.alert_steps() == [30]
    assert [NewEpisode in c for c in changed] == [True, False, False, False, False]  # the bell rings once
    assert all(Alerts in c for c in changed)  # each is listed
    lines = [text for _, text, _ in state.take_lines()]
    assert [t.split(":")[0] for t in lines] == [f"[alert] step {s}" for s in range(30, 35)]


def test_episodes_are_told_apart_by_rule_and_number_and_episode_0_counts_on_its_own():
    state = DashboardState()
    state.apply(skips(30, 3, episode=1) + skips(31, 2, episode=1, rule="grad_spike") + skips(50, 2, episode=2))
    state.apply(
        [
            AlertRaised(rule="stall", level="warning", title="stalled", text="no step for 10m", step=60),
            AlertRaised(rule="stall", level="warning", title="stalled", text="no step for 10m", step=70),
        ]
    )
    assert [(r, s) for (r, *_), s in zip(state.episodes, state.alert_steps())] == [
        ("loss_spike", 30),
        ("grad_spike", 31),
        ("loss_spike", 50),
        ("stall", 60),
        ("stall", 70),
    ]


def test_spikes_held_since_the_previous_alert_are_said_once():
    state = DashboardState()
    state.apply(
        [
            AlertRaised(
                rule="loss_spike",
                level="warning",
                title="loss spike at step 90",
                step=90,
                text="loss 9 at step 90 is above 2",
                episode=4,
                held=3,
            ),
            AlertRaised(
                rule="grad_spike",
                level="warning",
                title="gradient spike at step 95",
                step=95,
                text="grad_norm 80 at step 95 is above 5; 2 more spike(s) since the previous alert",
                episode=2,
                held=2,
            ),
        ]
    )
    lines = [text for _, text, _ in state.take_lines()]
    assert lines[0].endswith("loss 9 at step 90 is above 2 (+3 more spikes since the previous alert)")
    assert lines[1].count("more spike") == 1  # the rule's text says it already


@sync
async def test_five_alerts_of_one_episode_make_a_header_of_one_alert_and_one_mark():
    events = recorded_run(epochs=3, total_epochs=5, end="running") + skips(30, 5, episode=1)
    app = make_app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: len(app.state.alerts) == 5 and grid.charts["loss"].alert_marks)
        await pilot.pause()
        bar = app.query_one("#title-bar")
        assert bar.has_class("-alerting")
        header = str(bar.render())
        assert "⚠ 1 alert: loss spike at step 34" in header  # one episode; the newest alert's title
        loss = grid.charts["loss"]
        assert loss.alert_marks == [30]
        top = loss.drawn.lines[loss.drawn.top].text
        assert top.count("▼") == 1
        log = app.query_one("#log")
        await until(pilot, lambda: all(f"loss spike at step {s}" in shown(log) for s in range(30, 35)))
        # a second episode of the rule: two alerts, two marks
        app.bridge(skips(45, 2, episode=2)[0], None)
        app.bridge(skips(45, 2, episode=2)[1], None)
        await until(pilot, lambda: loss.alert_marks == [30, 45], timeout=10)
        await until(pilot, lambda: "⚠ 2 alerts: loss spike at step 46" in str(bar.render()), timeout=10)
