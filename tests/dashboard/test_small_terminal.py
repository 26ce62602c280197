"""80x24 is a size the dashboard is made for, and its labels explain themselves (issue 38, items 6
and 7): the header and the footer shortened, never cut mid-word; the devices rows fit; the chart area
says what it waits for before the first metric, and how to reach the charts that do not fit; the grid's
titles say train, valid and best in words where there is room; an overall progress bar beside the
phase's; a run in its own terminal (`Monitor`) is [live], [watching] only in `tuitrain watch`."""

from __future__ import annotations

import math

from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

from tuitrain.core.events import AlertRaised, MetricsLogged, PhaseStarted, RunStarted, StepCompleted
from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.fitting import title_line, words_within
from tuitrain.sources.run_files import FileSource, ReplaySource
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.charts.chart_note import ChartNote
from tuitrain.dashboard.panels.devices_panel import DevicesPanel, env_line
from tuitrain.dashboard.panels.progress_panel import ProgressPanel

from .fixtures import T0, recorded_run, write_jsonl
from .test_app import RecordingController, make_app, shown, sync, until
from .test_chart_keys import four_metrics

ALERT = "loss spike at step 57: 9.12 is above 2.05, five times the median of the last 200 steps"
# every word the footer may show, whole (the long ones and their short forms)
FOOTER_WORDS = {
    "Stop now",
    "Stop",
    "Checkpoint",
    "Ckpt",
    "Pause",
    "Quit",
    "Log",
    "Smooth",
    "X axis",
    "Axis",
    "Window",
    "Win",
    "Filter",
    "Export",
    "Inspect",
    "Keys",
    "Leave",
    "Runs",
}


def alerting_run() -> list:
    events = recorded_run(epochs=3, total_epochs=5, end="running")
    events.append(
        AlertRaised(
            rule="loss_spike",
            level="warning",
            title=ALERT,
            text="skipped",
            step=57,
            value=9.12,
            action="skip",
            episode=1,
        )
    )
    return events


def title_bar(app) -> str:
    return shown(app.query_one("#title-bar", Static)).rstrip()


def seven_metrics(steps: int = 30) -> list:
    names = ["loss", "perplexity", "accuracy", "lr", "throughput", "grad_norm", "data_wait"]
    ev = [
        RunStarted(
            run_dir="runs/charlm/1",
            experiment="charlm",
            epochs=6,
            max_steps=0,
            steps_per_epoch=10,
            batch_size=32,
            config={},
            time=T0,
        )
    ]
    for s in range(1, steps + 1):
        ev.append(
            MetricsLogged(
                split="train",
                epoch=(s - 1) // 10 + 1,
                step=s,
                batch=(s - 1) % 10 + 1,
                batches=10,
                metrics={n: math.exp(-s / 9) + i for i, n in enumerate(names)},
                time=T0 + s,
            )
        )
    return ev


# --- the header and the footer at 80x24 ---------------------------------------------------------------


def test_words_within_ends_at_a_word_and_says_so():
    assert words_within("loss spike at step 57", 40) == "loss spike at step 57"
    assert words_within("loss spike at step 57: 9.12 is above", 24) == "loss spike at step 57…"
    assert words_within("loss spike", 4) == ""


def test_the_title_line_gives_the_folder_away_before_the_alert_is_cut_short():
    line = title_line("charlm", "runs/charlm/20261126-071050", "live", 80, "⚠ 1 alert", ALERT).plain
    assert len(line) <= 80 and line.startswith(" charlm  runs/charlm/20261126-071050  [live]  ⚠ 1 alert: loss")
    # narrower: the folder's leading parts go, then the folder, rather than the alert's words
    line = title_line("charlm", "runs/charlm/20261126-071050", "live", 70, "⚠ 1 alert", ALERT).plain
    assert line == " charlm  …/20261126-071050  [live]  ⚠ 1 alert: loss spike at step 57…"
    line = title_line("charlm", "runs/charlm/20261126-071050", "live", 60, "⚠ 1 alert", ALERT).plain
    assert line == " charlm  [live]  ⚠ 1 alert: loss spike at step 57: 9.12 is…"


@sync
async def test_at_80x24_the_header_and_the_footer_are_whole_words():
    app = make_app(alerting_run(), controller=RecordingController())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(app.state.alerts) == 1 and "alert" in title_bar(app))
        await pilot.pause()
        header = title_bar(app)
        assert len(header) <= 80 and "[live]" in header and "spirals" in header
        said = header.split("1 alert: ")[1]
        assert said.endswith("…") and f"{said[:-1]} " in ALERT, header  # cut after a whole word, and says so
        footer = app.query_one(Footer)
        keys = list(footer.query(FooterKey))
        assert keys and all(k.region.right <= 80 for k in keys), [(k.key, k.region) for k in keys]
        assert all(k.description in FOOTER_WORDS for k in keys), [k.description for k in keys]
        assert "question_mark" in [k.key for k in keys]  # the key to the whole list stays
        # the devices rows fit their panel whole: shorter units, the parts that do not fit left out whole
        devices = shown(app.query_one(DevicesPanel))
        assert "…" not in devices and "30.0G/80.0G" in devices and "6.0G/16.0G" in devices, devices


def test_the_environment_line_leaves_out_whole_parts():
    env = {"torch": "2.13.0+cpu", "python": "3.11.7", "device": "cpu", "git_commit": "e635a67abc", "git_dirty": True}
    assert env_line(env) == "torch 2.13.0+cpu · py 3.11.7 · cpu · git e635a67*"
    assert env_line(env, 34) == "torch 2.13.0+cpu · git e635a67*"


# --- the chart area: never empty, the charts out of view reachable -----------------------------------


@sync
async def test_before_the_first_metric_the_chart_area_says_what_it_waits_for():
    events = [
        RunStarted(
            run_dir="runs/x/1",
            experiment="x",
            epochs=2,
            max_steps=0,
            steps_per_epoch=100,
            batch_size=32,
            config={},
            time=T0,
        ),
        PhaseStarted(phase="train", split="train", epoch=1, step=0, batches=100, time=T0),
        *[StepCompleted(phase="train", epoch=1, step=s, batch=s - 1, items=32, time=T0 + s) for s in range(1, 8)],
    ]
    app = DashboardApp(ReplaySource(events, wait=True), RecordingController(), clock=lambda: T0 + 10)
    async with app.run_test(size=(80, 24)) as pilot:
        note = app.query_one(ChartNote)
        await until(pilot, lambda: "step 7" in note.text)
        assert note.text == "waiting for the first metrics… (step 7, train)" and note.display
        assert note.has_class("-alone") and note.size.height > 10  # the chart area's whole, not a line
        assert not app.query_one(ChartGrid).display


@sync
async def test_a_chart_that_does_not_fit_is_named_below_the_grid_and_pgdn_reaches_it():
    app = make_app(seven_metrics(), controller=RecordingController())
    async with app.run_test(size=(120, 40)) as pilot:
        g = app.query_one(ChartGrid)
        note = app.query_one(ChartNote)
        await until(pilot, lambda: len(g.charts) == 7 and all(c.points for c in g.charts.values()))
        await until(pilot, lambda: note.text == "+1 more chart below: Tab / PgDn")
        last = g.charts["data_wait"]
        assert not g.region.contains_region(last.region)
        in_view = [c for c in g.charts.values() if g.region.contains_region(c.region)]
        assert len(in_view) == 6
        # every chart's border whole: none of the grid's rows is cut at its bottom edge
        assert all(c.region.height == in_view[0].region.height for c in in_view)
        await pilot.press("pagedown")
        await until(pilot, lambda: g.region.contains_region(last.region))
        assert app.focused is last
        await until(pilot, lambda: note.text.startswith("+") and "above" in note.text)
        await pilot.press("pageup")
        await until(pilot, lambda: g.region.contains_region(g.charts["loss"].region))
        await until(pilot, lambda: "below" in note.text)


@sync
async def test_at_80x24_the_other_charts_are_counted_and_reachable():
    app = make_app(seven_metrics(), controller=RecordingController())
    async with app.run_test(size=(80, 24)) as pilot:
        g = app.query_one(ChartGrid)
        note = app.query_one(ChartNote)
        await until(pilot, lambda: len(g.charts) == 7 and all(c.points for c in g.charts.values()))
        await until(pilot, lambda: note.text == "+6 more charts below: Tab / PgDn")
        await pilot.press("tab", "tab")
        await until(pilot, lambda: g.region.contains_region(g.charts["perplexity"].region))
        await until(pilot, lambda: note.text == "+1 above, +5 below: Tab / PgUp / PgDn")


# --- the titles and the progress bars ----------------------------------------------------------------


@sync
async def test_at_120x40_the_grid_titles_say_train_and_valid_in_words():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        g = app.query_one(ChartGrid)
        await until(pilot, lambda: len(g.charts) == 4 and all(c.points for c in g.charts.values()))
        await pilot.pause()
        for name in ("loss", "accuracy"):
            chart = g.charts[name]
            await until(pilot, lambda: len(chart.title_text) <= chart.outer_size.width - 6)
            assert chart.title_text.startswith(name) and "train " in chart.title_text, chart.title_text
            assert "valid " in chart.title_text, chart.title_text
            best = f"best {app.state.best_valid(name):.2g}"[:7]
            assert best in chart.title_text or best in str(chart.border_subtitle)
        assert "train " in g.charts["lr"].title_text and "valid" not in g.charts["lr"].title_text


@sync
async def test_the_run_s_progress_bar_beside_the_phase_s_reads_the_run_s_totals():
    app = make_app()  # 3 epochs of 5 done: step 60 of 100, the last phase (valid) at 5 of 5 batches
    async with app.run_test(size=(120, 40)) as pilot:
        progress = app.query_one(ProgressPanel)
        await until(pilot, lambda: app.state.step == 60 and "run" in progress.bars)
        await pilot.pause()
        assert progress.bars == {"phase": (5, 5), "run": (60, 100)}
        lines = shown(progress).splitlines()
        phase = next(line for line in lines if "Phase" in line)
        step = next(line for line in lines if "Step" in line)
        assert "valid 5/5" in phase and "━" in phase and "100%" in phase
        assert "60 / 100" in step and "━" in step and "60%" in step
        assert phase.index("━") == step.index("━")  # the two bars start in one column


@sync
async def test_a_run_of_unknown_steps_shows_its_epochs_as_the_run_s_bar():
    events = recorded_run(epochs=2, total_epochs=4, end="running")
    events[0] = RunStarted(
        run_dir="runs/x/1", experiment="x", epochs=4, max_steps=0, steps_per_epoch=0, batch_size=32, config={}, time=T0
    )
    app = make_app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        progress = app.query_one(ProgressPanel)
        await until(pilot, lambda: app.state.epoch == 2 and "run" in progress.bars)
        await pilot.pause()
        assert progress.bars["run"] == (1, 4)  # epoch 2 under way (its validation): one epoch of four done
        epoch = next(line for line in shown(progress).splitlines() if "Epoch" in line)
        assert "2/4" in epoch and "25%" in epoch


# --- [live] or [watching] ----------------------------------------------------------------------------


@sync
async def test_a_monitor_run_in_its_own_terminal_is_live_and_tuitrain_watch_is_watching(tmp_path):
    run_dir = tmp_path / "run"
    write_jsonl(run_dir / "events.jsonl", recorded_run(epochs=2, total_epochs=5, end="running"))
    for owned, says in ((True, "[live]"), (False, "[watching · live]")):
        app = DashboardApp(
            FileSource(run_dir, live=True), RecordingController(), watch=True, owned=owned, clock=lambda: T0 + 100
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.state.step == 40 and says in title_bar(app))
            assert ("watching" in title_bar(app)) is not owned, title_bar(app)


def test_the_notice_gives_way_by_its_parts_then_by_words_never_mid_word():
    """At 80x24 a notice was cut mid-phrase ("… keys that steer are"): its last " · " parts go first."""
    from tuitrain.dashboard.screens.screen import notice_text

    said = "comparing 3 runs: R run list · d config differences · keys that steer are off"
    assert [notice_text(said, room=room).plain for room in (0, 80, 60, 30, 12)] == [
        said,
        said,
        "comparing 3 runs: R run list · d config differences",
        "comparing 3 runs: R run list",
        "comparing 3…",
    ]
    assert notice_text("x" * 300, room=40).plain == "x" * 300  # one word wider than the bar: Rich cuts it, never blank
