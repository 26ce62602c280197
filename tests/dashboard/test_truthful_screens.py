"""What every screen says is true (issue 51): a killed run is called killed and its time stops at its
last event; the paths printed on leaving can be used from the terminal they are printed in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.state.compare import CompareSource, CompareState, run_names
from tuitrain.sources.run_files import FileSource, ReplaySource
from tuitrain.dashboard.panels.progress_panel import ProgressPanel
from tuitrain.dashboard.screens.result_screen import ResultScreen, result_body, result_title

from .fixtures import T0, last_time, recorded_run, write_jsonl
from .test_app import SIZE, shown, sync, until


def killed_run(folder, epochs: int = 1):
    """A run folder as kill -9 leaves it: events up to the kill, run.json "running" with a dead pid."""
    events = recorded_run(epochs=epochs, total_epochs=3, end="running")
    write_jsonl(folder / "events.jsonl", events)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (folder / "run.json").write_text(json.dumps({"status": "running", "pid": gone.pid}))
    return events


@sync
async def test_a_killed_run_watched_later_shows_its_training_time_not_the_time_since_it_died(tmp_path):
    events = killed_run(tmp_path)
    died = last_time(events)
    app = DashboardApp(FileSource(tmp_path, poll=0.02), None, watch=True, clock=lambda: died + 600)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.final == "killed")
        await pilot.pause(0.2)
        assert app.state.elapsed() == died - T0  # 0:00:12, not 0:10:12
        panel = shown(app.query_one(ProgressPanel))
        assert "0:00:12" in panel and "0:10" not in panel and "killed" in panel
        assert "ETA -" in panel  # not "ETA 0:00:00": it will not end on its own
        title, body = result_title(app.state), result_body(app.state, None)
    # what leaving prints: killed, not "Training completed"
    assert "killed" in title and "completed" not in title.lower()
    assert body.startswith("killed · epoch 1 · step 20 · 0:00:12")
    assert "best checkpoint: " + str(tmp_path / "checkpoint/epoch-1.pt") in body


@sync
async def test_a_killed_run_among_compared_runs_is_listed_killed_not_live(tmp_path):
    done, killed = tmp_path / "A", tmp_path / "KILLED"
    write_jsonl(done / "events.jsonl", recorded_run(epochs=2))
    killed_run(killed)
    runs = [done, killed]
    names = run_names(runs)
    app = DashboardApp(CompareSource(runs, names, [False, True]), None, watch=True)
    app.state = CompareState(names, {}, clock=app.clock)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.status_of("KILLED") == "killed", timeout=10)
        await pilot.pause(0.2)
        title = str(app.query_one("#title-bar").render())
        assert "KILLED [killed]" in title and "[live]" not in title
        assert app.state.status_of("A") == "completed"


@sync
async def test_the_best_checkpoint_on_leaving_is_named_under_its_run_directory():
    events = recorded_run(epochs=3, end="completed")
    app = DashboardApp(ReplaySource(events, exit_code=0, wait=False), None, clock=lambda: last_time(events))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        body = app.screen.body_text
    # the run's folder as this process names it (runs/...), not a path relative to a folder never named
    assert "best checkpoint: runs/spirals/20240101-000000/checkpoint/epoch-2.pt" in body


@sync
async def test_the_summary_modal_shows_a_table_not_markdown():
    events = recorded_run(epochs=3, end="completed")
    app = DashboardApp(ReplaySource(events, exit_code=0, wait=False), None, clock=lambda: last_time(events))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        await pilot.pause(0.2)
        body = shown(app.screen.query_one("#result-body"))
    assert "| Split" not in body and "|---" not in body and "|-------|" not in body
    lines = [line.strip() for line in body.splitlines()]
    assert lines[lines.index(next(x for x in lines if x.startswith("Split")))].split() == [
        "Split",
        "Metric",
        "Min.",
        "Epoch",
        "Max.",
        "Epoch",
    ]
    assert any(line.split()[:2] == ["valid", "loss"] for line in lines if line)


@sync
async def test_a_page_of_charts_starts_at_a_chart_s_top_after_the_grid_changes_height():
    """80x24, PgDn, then the grid's height changes (the terminal resized, a panel beside it grown, the
    buttons gone at the run's end): the top chart is still whole, its title border at the top."""
    from tuitrain.dashboard.charts.chart_grid import ChartGrid

    events = recorded_run(epochs=3, end="completed")
    app = DashboardApp(ReplaySource(events, exit_code=0, wait=False), None, clock=lambda: last_time(events))
    async with app.run_test(size=(80, 24)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        await pilot.press("escape")
        await until(pilot, lambda: len(grid.visible()) >= 3 and grid.out_of_view()[1] > 0)
        await pilot.press("pagedown")
        await pilot.pause(0.2)
        second = grid.visible()[1]
        assert grid.scroll_offset.y == second.virtual_region.y > 0
        for size in ((80, 27), (80, 22), (100, 30)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.3)
            tops = [c.virtual_region.y for c in grid.visible()]
            assert grid.scroll_offset.y in tops, (size, grid.scroll_offset.y, tops)
            assert grid.scroll_offset.y == second.virtual_region.y  # the same chart on top
            top_line = shown(grid).splitlines()[0]
            assert top_line.lstrip()[:1] in "╭┏", top_line


@pytest.mark.parametrize("runs, size", [(2, (80, 24)), (3, (80, 24)), (4, (100, 30)), (6, (80, 24)), (6, (120, 40))])
@sync
async def test_the_config_differences_keep_each_run_s_name_on_one_line(runs, size):
    from textual.app import App

    from tuitrain.dashboard.state.compare import run_color
    from tuitrain.dashboard.screens.diff_screen import DiffScreen

    names = [f"20261128-0643{i:02d}" for i in range(runs)]
    rows = [
        ("optimizer.lr", [f"0.00{i + 1}" for i in range(runs)]),
        ("scheduler.max_lr", [f"0.0{i + 3}" for i in range(runs)]),
    ]
    app = App()
    async with app.run_test(size=size) as pilot:
        app.push_screen(DiffScreen(names, rows, [run_color(i) for i in range(runs)]))
        await pilot.pause(0.3)
        screen = "\n".join(shown(w) for w in app.screen.query("Static"))
    for name in names:  # whole, on one line (not 202611 / 28-064 / 353)
        assert name in screen, screen
    assert "0.001" in screen and f"0.0{runs + 2}" in screen


@sync
async def test_a_run_shorter_than_one_device_sample_still_shows_its_devices():
    """A 2 s Learner run ended before the sampler's first tick: the panel showed "no device samples yet"."""
    from tuitrain.core.devices import DeviceMonitor
    from tuitrain.core.events import DevicesSampled
    from tuitrain.dashboard.panels.devices_panel import DevicesPanel

    events = recorded_run(epochs=1, end="completed")
    emitted = []
    monitor = DeviceMonitor(emitted.append, interval=600.0)  # the run ends long before its first tick
    monitor.start_on_run_started(events[0])
    monitor.start_on_run_started(events[-1])  # RunFinished: the learner closes its bus right after it
    samples = [e for e in emitted if isinstance(e, DevicesSampled)]
    assert len(samples) == 1  # one reading at the run's end, while the bus still takes it
    monitor.close()
    assert len(emitted) == 1  # no second one
    alone = []
    monitor = DeviceMonitor(alone.append, interval=600.0).start()
    monitor.close()  # ended without a RunFinished: one reading as it closes
    monitor.close()
    assert len(alone) == 1 and isinstance(alone[0], DevicesSampled)

    events = [e for e in events if not isinstance(e, DevicesSampled)]
    events.insert(-1, samples[0])  # the sample comes as the run ends, with its last events
    app = DashboardApp(ReplaySource(events, exit_code=0, wait=False), None, clock=lambda: last_time(events))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ResultScreen))
        await pilot.press("escape")
        await pilot.pause(0.2)
        panel = shown(app.query_one(DevicesPanel))
    assert "no device samples yet" not in panel and "CPU" in panel and "Mem" in panel


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("how", ["run", "watch", "compare"])
@sync
async def test_the_help_screen_explains_every_mark_and_fits_the_screen(size, how):
    """`?`: the epoch lines ┊ (and why only some), the alerts ▼, the best ★, the devices' bars and blocks
    are explained, all of it on the screen, at 80x24 too."""
    from tests.dashboard.test_app import RecordingController

    from tuitrain.dashboard.screens.help_screen import HelpScreen

    events = recorded_run(epochs=3, total_epochs=5, end="running")
    if how == "compare":
        from tuitrain.dashboard.state.compare import CompareState

        app = DashboardApp(ReplaySource(events), None, watch=True, clock=lambda: last_time(events))
        app.state = CompareState(["a", "b"], {}, clock=app.clock)
    else:
        app = DashboardApp(
            ReplaySource(events),
            RecordingController() if how == "run" else None,
            watch=how == "watch",
            clock=lambda: last_time(events),
        )
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause(0.3)
        box = app.screen.query_one("#help-box")
        assert box.virtual_size.height <= box.content_size.height  # nothing cut off
        assert box.region.bottom <= size[1]
        marks = shown(app.screen.query_one("#help-marks"))
        close = shown(app.screen.query_one("#help-close"))
    assert "any key closes this" in close
    for mark, words in (("┊", "epoch"), ("▼", "alert"), ("★", "best"), ("██", "CPU"), ("█", "core"), ("•", "valid")):
        assert mark in marks and words in marks, (mark, marks)
    assert "dozen" in marks and "every k-th" in marks  # why only some epochs have their line


def test_a_run_that_has_not_logged_its_monitored_metric_shows_no_other_metric_in_its_place():
    """Compared runs monitoring valid/accuracy: one killed before its first validation showed its train loss
    under the accuracy heading (found by the newcomer walk, issue 51)."""
    from tuitrain.core.events import MetricsLogged, RunStarted
    from tuitrain.dashboard.state.compare import CompareState, Tagged

    state = CompareState(["a"], {"a": {"checkpoint": {"monitor": "valid/accuracy", "mode": "max"}}})
    state.apply(
        [
            Tagged(
                RunStarted(
                    run_dir="a",
                    experiment="x",
                    epochs=3,
                    max_steps=0,
                    steps_per_epoch=10,
                    batch_size=8,
                    pid=1,
                    config={"checkpoint": {"monitor": "valid/accuracy", "mode": "max"}},
                ),
                "a",
            ),
            Tagged(MetricsLogged(split="train", epoch=1, step=5, metrics={"loss": 0.6895}), "a"),
        ]
    )
    assert state.runs["a"].latest  # the loss is in
    assert state.monitored("a") == (None, False)
