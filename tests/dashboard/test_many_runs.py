"""Tens of runs compared (`tuitrain watch runs/exp`): the run list names every run with its status and
monitored value; space hides a run (its series leave the charts, its entry the legend), `/` filters
by name or by config value (`optimizer.lr=1e-3` matches a run whose config says 0.001), and a pinned
run stays shown under a filter that leaves it out. 30 recorded runs, written as the runner leaves
them (events.jsonl, config.toml, run.json)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from tuitrain.core.events import CheckpointSaved, MetricsLogged, RunStarted
from tuitrain.dashboard.state.compare import CompareState, RunFilter
from tuitrain.dashboard.entry import compare_app
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.screens.diff_screen import DiffScreen
from tuitrain.dashboard.screens.filter_screen import FilterScreen
from tuitrain.dashboard.charts.metric_plot import MetricPlot
from tuitrain.dashboard.panels.run_list import PINNED, SHOWN, RunList

from .fixtures import recorded_run, write_jsonl
from .test_app import SIZE, sync, until

RUNS = 30
LRS = (0.001, 0.003, 0.01)  # written as TOML reads them back: 0.001, never 1e-3


def lr_of(i: int) -> float:
    return LRS[i % len(LRS)]


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory):
    """30 runs of 60 logged steps: lr 0.001/0.003/0.01 in turn, every tenth one failed."""
    root = tmp_path_factory.mktemp("many") / "exp"
    dirs = []
    for i in range(RUNS):
        name = f"run-{i:02d}-lr{lr_of(i):g}"
        run_dir = root / name
        failed = i % 10 == 9
        events = recorded_run(epochs=3, steps_per_epoch=20, end="failed" if failed else "completed")
        config = {
            "experiment": {"name": "exp", "seed": 0},
            "optimizer": {"name": "AdamW", "lr": lr_of(i)},
            "checkpoint": {"monitor": "valid/loss", "mode": "min"},
            "train": {"validate_every": 1},
        }
        scale = 1 + i / RUNS  # each run its own curve
        events = [
            dataclasses.replace(e, config=config, run_dir=str(run_dir))
            if isinstance(e, RunStarted)
            else dataclasses.replace(e, metrics={k: v * scale for k, v in e.metrics.items()})
            if isinstance(e, (MetricsLogged, CheckpointSaved))
            else e
            for e in events
        ]
        write_jsonl(run_dir / "events.jsonl", events)
        (run_dir / "config.toml").write_text(
            f'[experiment]\nname = "exp"\nseed = 0\n\n[optimizer]\nname = "AdamW"\nlr = {lr_of(i)!r}\n\n'
            '[checkpoint]\nmonitor = "valid/loss"\nmode = "min"\n'
        )
        (run_dir / "run.json").write_text(json.dumps({"status": "failed" if failed else "completed", "pid": 0}))
        dirs.append(run_dir)
    return dirs


def loaded(app) -> bool:
    """Every run read to its end and drawn in the loss chart."""
    grid = app.query_one(ChartGrid)
    loss = grid.charts.get("loss")
    return (
        loss is not None
        and all(rs.final for rs in app.state.runs.values())
        and not app.bridge.pending()
        and sum(k.startswith("train/") for k in loss.points) == len(app.state.shown_runs())
    )


def drawn_runs(app) -> set[str]:
    """The runs whose series the loss chart holds."""
    loss = app.query_one(ChartGrid).charts["loss"]
    return {key.partition("/")[2] for key in loss.points}


def legend(app) -> str:
    return str(app.query_one("#title-bar").render())


async def open_runs(pilot, app):
    await pilot.press("R")
    run_list = app.query_one(RunList)
    assert run_list.has_focus
    return run_list


async def go_to(pilot, run_list: RunList, name: str) -> None:
    run_list.move_cursor(row=run_list._names.index(name))
    await pilot.pause()
    assert run_list.current_run() == name


async def set_filter(pilot, app, text: str) -> None:
    await pilot.press("slash")
    await until(pilot, lambda: isinstance(app.screen, FilterScreen))
    app.screen.query_one("Input").value = text
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, FilterScreen))
    await pilot.pause()


@sync
async def test_the_run_list_names_every_run_with_its_status_and_value(many_runs):
    app = compare_app(many_runs, None)
    names = list(app.state.runs)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: loaded(app))
        await pilot.pause(0.3)
        run_list = app.query_one(RunList)
        await until(pilot, lambda: all(r.status in ("completed", "failed") for r in run_list.runs))
        rows = {r.name: r for r in run_list.runs}
        assert list(rows) == names and len(rows) == RUNS
        assert [n for n, r in rows.items() if r.status == "failed"] == [n for i, n in enumerate(names) if i % 10 == 9]
        # the value: the best checkpoint's valid/loss (epoch 2 is each run's best), the run's own
        for i, name in enumerate(names):
            assert rows[name].best and rows[name].value == pytest.approx(2.4 / (1 + 40 / 10) * (1 + i / RUNS))
            assert rows[name].mark == SHOWN
        # on screen: every row's number, name, status and value (30 rows fit at 120x40)
        shown = [" ".join(str(c) for c in run_list.get_row_at(k)) for k in range(run_list.row_count)]
        for k, name in enumerate(names):
            assert f"━{k + 1}" in shown[k] and name in shown[k] and rows[name].status in shown[k], shown[k]
            assert f"{rows[name].value:.4f}"[:5] in shown[k]
        assert "valid/loss" in str(run_list.border_title) and "30/30 shown" in str(run_list.border_title)
        # the side column is the run list's: one run's progress and checkpoints are not shown
        assert run_list.region.height >= RUNS + 3
        assert not any(app.query_one(f"#{panel}").region.height for panel in ("progress", "devices", "checkpoints"))
        footer = {b.binding.description for b in app.screen.active_bindings.values() if b.binding.show}
        assert "Runs" in footer
        await pilot.press("q")


@sync
async def test_hiding_a_run_takes_its_series_and_its_legend_entry_away(many_runs):
    app = compare_app(many_runs, None)
    names = list(app.state.runs)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: loaded(app))
        assert drawn_runs(app) == set(names)
        assert f"━1 {names[0]}" in legend(app)
        run_list = await open_runs(pilot, app)
        await pilot.press("space")  # the cursor starts on the first run
        await until(pilot, lambda: names[0] not in drawn_runs(app))
        assert drawn_runs(app) == set(names[1:])
        for chart in app.query_one(ChartGrid).visible():  # every chart, and its title: run 1's latest value is gone
            assert not any(k.endswith(f"/{names[0]}") for k in chart.points)
            assert not chart.title_text.split()[1].startswith("1:"), chart.title_text
        assert names[0] not in legend(app) and "comparing 29 of 30 runs" in legend(app)
        assert "━2 " + names[1] in legend(app)
        assert run_list.runs[0].mark != SHOWN and "29/30 shown" in str(run_list.border_title)
        # the cursor stayed on the run; down twice and space: a third run hidden
        assert run_list.current_run() == names[0]
        await pilot.press("down", "down", "space")
        await until(pilot, lambda: names[2] not in drawn_runs(app))
        await pilot.press("up", "up", "space")  # shown again
        await until(pilot, lambda: names[0] in drawn_runs(app))
        assert drawn_runs(app) == set(names) - {names[2]}
        # o: this run alone; a: every run again
        await go_to(pilot, run_list, names[5])
        await pilot.press("o")
        await until(pilot, lambda: drawn_runs(app) == {names[5]})
        assert legend(app).count("━") == 1
        await pilot.press("d")  # the config differences of the runs shown: one run, nothing differs
        await until(pilot, lambda: isinstance(app.screen, DiffScreen))
        assert app.screen.names == [names[5]] and app.screen.rows == []
        await pilot.press("escape")
        await pilot.press("R")  # the run list has the focus: R (or Esc) goes back to the charts
        assert isinstance(app.focused, MetricPlot)
        await pilot.press("R", "a")
        await until(pilot, lambda: drawn_runs(app) == set(names))
        await pilot.press("escape")
        assert isinstance(app.focused, MetricPlot)
        await pilot.press("q")


@sync
async def test_name_and_config_filters_leave_exactly_the_matching_runs(many_runs):
    app = compare_app(many_runs, None)
    names = list(app.state.runs)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: loaded(app))
        run_list = await open_runs(pilot, app)
        await set_filter(pilot, app, "run-0[0-4]")  # a name: a regular expression
        await until(pilot, lambda: drawn_runs(app) == set(names[:5]))
        assert {r.name for r in run_list.runs if r.mark == SHOWN} == set(names[:5])
        assert len(run_list.runs) == RUNS  # the list still names them all
        await set_filter(pilot, app, "optimizer.lr=1e-3")  # 1e-3 is the 0.001 of config.toml
        want = {n for i, n in enumerate(names) if lr_of(i) == 0.001}
        await until(pilot, lambda: drawn_runs(app) == want)
        assert len(want) == 10
        assert all(n in legend(app) for n in want) and not any(n in legend(app) for n in set(names) - want)
        assert "optimizer.lr=1e-3" in str(run_list.border_title)
        await set_filter(pilot, app, "lr>=3e-3 -0")  # the key's last part, a comparison, and a name
        want = {n for i, n in enumerate(names) if lr_of(i) >= 0.003 and "-0" in n}
        await until(pilot, lambda: drawn_runs(app) == want)
        await set_filter(pilot, app, "optimizer.lr=0.5")  # nothing matches: said so, no chart series
        await until(pilot, lambda: drawn_runs(app) == set())
        assert "none shown" in legend(app)
        await set_filter(pilot, app, "")
        await until(pilot, lambda: drawn_runs(app) == set(names))
        await pilot.press("q")


@sync
async def test_a_pinned_run_stays_shown_under_a_filter_that_leaves_it_out(many_runs):
    app = compare_app(many_runs, None)
    names = list(app.state.runs)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: loaded(app))
        run_list = await open_runs(pilot, app)
        pinned = names[2]  # lr 0.01
        await go_to(pilot, run_list, pinned)
        await pilot.press("p")
        await pilot.pause()
        assert run_list.runs[0].name == pinned and run_list.runs[0].mark == PINNED  # listed first
        assert run_list.current_run() == names[3]  # the cursor went on to the next run
        assert legend(app).index(f"◆3 {pinned}") < legend(app).index(f"━1 {names[0]}")  # the legend's first
        await set_filter(pilot, app, "optimizer.lr=1e-3")
        want = {n for i, n in enumerate(names) if lr_of(i) == 0.001}
        await until(pilot, lambda: drawn_runs(app) == want | {pinned})
        loss = app.query_one(ChartGrid).charts["loss"]
        assert [k for k in loss.points if k.startswith("train/")][-1] == f"train/{pinned}"  # drawn last: on top
        assert re.match(r"loss\s+(━3 |3:)", loss.title_text), loss.title_text  # the chart's title names it first
        # space on the pinned run: unpinned and hidden, the filter's runs stay
        await go_to(pilot, run_list, pinned)
        await pilot.press("space")
        await until(pilot, lambda: drawn_runs(app) == want)
        await pilot.press("q")


def test_run_filter_terms():
    cfg = {
        "optimizer": {"name": "AdamW", "lr": 0.001},
        "model": {"hidden": 64, "act": "gelu"},
        "experiment": {"name": "exp"},
        "metrics": {"train": ["loss", "acc"]},
        "ema": {"on": True},
    }
    assert RunFilter("optimizer.lr=1e-3").matches("r", cfg)
    assert RunFilter("optimizer.lr=0.001000").matches("r", cfg)
    assert not RunFilter("optimizer.lr=1e-2").matches("r", cfg)
    assert RunFilter("lr=1e-3").matches("r", cfg)  # the key's last part
    assert RunFilter("name=AdamW").matches("r", cfg)  # any key ending in .name
    assert RunFilter('optimizer.name="AdamW" model.hidden=64').matches("r", cfg)
    assert not RunFilter("model.hidden=64 model.act=relu").matches("r", cfg)  # every term must hold
    assert RunFilter("model.hidden=64.0").matches("r", cfg) and RunFilter("model.hidden>32").matches("r", cfg)
    assert not RunFilter("model.hidden<64").matches("r", cfg) and RunFilter("model.hidden!=65").matches("r", cfg)
    assert RunFilter('metrics.train=["loss", "acc"]').matches("r", cfg)
    assert RunFilter("ema.on=true").matches("r", cfg) and not RunFilter("ema.on=1").matches("r", cfg)
    assert not RunFilter("missing.key=1").matches("r", cfg)
    assert RunFilter("LR0.0").matches("run-lr0.01", {}) and not RunFilter("h64").matches("run-lr0.01", {})
    assert RunFilter("[").matches("a[b", {})  # not an expression: the text itself
    assert RunFilter("lr=").error and not RunFilter("").error and RunFilter("").matches("x", {})


def test_shown_runs_pinned_first_drawn_last():
    st = CompareState(["a", "b", "c", "d"], {"a": {"x": 1}, "b": {"x": 2}, "c": {"x": 1}, "d": {"x": 2}})
    assert st.set_run_filter("x=1") == "" and st.shown_runs() == ["a", "c"]
    st.pin("d")
    assert st.shown_runs() == ["d", "a", "c"] and st.drawn_runs() == ["a", "c", "d"]
    assert st.toggle("b")  # left out by the filter: a note says how to show it
    st.toggle("a")
    assert st.shown_runs() == ["d", "c"]
    st.only("b")
    assert st.shown_runs() == ["d", "b"] and not st.run_filter
    st.show_all()
    assert st.shown_runs() == ["d", "a", "b", "c"]
    assert st.differences(["a", "c"]) == [] and st.differences(["a", "b"]) == [("x", ["1", "2"])]


def test_config_differences_of_runs_without_a_config_toml_read_their_started_config():
    """Other tools' runs (TensorBoard's add_hparams, MLflow's params, trackio's and W&B's configs) have no
    config.toml: `d` said "the runs' configs are the same" while `R` filtered by the same values."""
    from tuitrain.dashboard.state.compare import Tagged

    st = CompareState(["tb1", "tb2"], {})
    started = lambda lr: RunStarted(  # noqa: E731
        run_dir="a", experiment="a", epochs=0, max_steps=0, steps_per_epoch=0, batch_size=0, config={"lr": lr, "bs": 8}
    )
    st.apply([Tagged(started(0.1), "tb1"), Tagged(started(0.01), "tb2")])
    assert st.differences() == [("lr", ["0.1", "0.01"])]
    assert st.set_run_filter("lr=0.1") == "" and st.shown_runs() == ["tb1"]


@sync
async def test_the_run_list_s_status_head_stays_whole_when_every_run_is_live():
    """Every run live: the status column was as wide as "live", so its head read "statumonitored"."""
    from textual.app import App

    class Host(App):
        def compose(self):
            yield RunList()

    app = Host()
    async with app.run_test(size=(120, 20)) as pilot:
        runs = app.query_one(RunList)
        runs.show(CompareState(["a", "b"], {}))
        await pilot.pause()
        heads = {str(c.key.value): (str(c.label), c.width) for c in runs.columns.values()}
        assert heads["status"][0] == "status" and heads["status"][1] >= len("status") + 1, heads
        assert [r.status for r in runs.runs] == ["live", "live"]
    from tuitrain.dashboard.panels.run_list import LEGEND, legend_for

    # the marks' legend in the border: whole at 80x24's 36-cell list (it was cut to "· f…"), in full where it fits
    assert legend_for(36) == "●shown ◆pinned ○hidden ·out" and legend_for(48) == LEGEND


def test_snapshot_thirty_runs_filtered_with_one_pinned(snap_compare, many_runs):
    """The run list at 120x40 with run 3 pinned and `optimizer.lr=1e-3`: 11 runs drawn, 30 listed."""
    app = compare_app(many_runs, None)

    async def run_before(pilot) -> None:
        await until(pilot, lambda: loaded(app))
        run_list = await open_runs(pilot, app)
        await go_to(pilot, run_list, list(app.state.runs)[2])
        await pilot.press("p")
        await set_filter(pilot, app, "optimizer.lr=1e-3")
        await until(pilot, lambda: len(drawn_runs(app)) == 11)
        await pilot.pause(0.3)

    assert snap_compare(app, run_before=run_before, terminal_size=SIZE)
