"""The chart grid under Pilot: its size at each terminal, the focus keys, each chart's reading tools
(l, s, x, w), the filter (/), zoom (Enter) and export (e), fed a recorded run."""

from __future__ import annotations

import csv
import math

import pytest

from tuitrain.core.events import MetricsLogged, RunStarted
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.screens.filter_screen import FilterScreen
from tuitrain.dashboard.charts.metric_plot import MetricPlot
from tuitrain.dashboard.panels.output_log import OutputLog

from tuitrain.dashboard.charts.plan import short

from .fixtures import T0, recorded_run
from .test_app import RecordingController, make_app, shown, sync, until

FOUR = ["loss", "accuracy", "lr", "grad_norm"]


def four_metrics(steps: int = 40, run_dir: str = "runs/x/1") -> list:
    """A run logging four metrics, valid loss and accuracy per epoch of 10 steps, no output lines."""
    ev = [
        RunStarted(
            run_dir=run_dir,
            experiment="four",
            epochs=4,
            max_steps=0,
            steps_per_epoch=10,
            batch_size=32,
            config={"checkpoint": {"monitor": "valid/loss", "mode": "min"}},
            time=T0,
        )
    ]
    for s in range(1, steps + 1):
        loss = 0.69 * math.exp(-s / 8) + 3.2e-05
        ev.append(
            MetricsLogged(
                split="train",
                epoch=(s - 1) // 10 + 1,
                step=s,
                batch=(s - 1) % 10 + 1,
                batches=10,
                metrics={"loss": loss, "accuracy": 1 - loss, "lr": 1e-3, "grad_norm": 2.0 / s},
                time=T0 + s,
            )
        )
        if s % 10 == 0:
            ev.append(
                MetricsLogged(
                    split="valid",
                    epoch=s // 10,
                    step=s,
                    scope="epoch",
                    metrics={"loss": loss * 1.5, "accuracy": 1 - loss * 1.5},
                    time=T0 + s,
                )
            )
    return ev


def grid(app) -> ChartGrid:
    return app.query_one(ChartGrid)


@pytest.mark.parametrize("size, at_least, at_most", [((80, 24), 1, 2), ((120, 40), 4, 6), ((200, 60), 4, 16)])
@sync
async def test_the_grid_shows_as_many_charts_as_the_terminal_holds(size, at_least, at_most):
    app = make_app(four_metrics())
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4 and all(c.points for c in grid(app).charts.values()))
        g = grid(app)
        on_screen = lambda: [c for c in g.charts.values() if g.region.contains_region(c.region)]  # noqa: E731
        # the rows take the grid's height once the note under it ("+3 more charts below") has its row
        await until(pilot, lambda: at_least <= len(on_screen()) <= at_most, timeout=10)
        assert not app.query_one(OutputLog).display  # nothing printed: the output panel takes no rows
        loss = g.charts["loss"]
        # latest train, latest valid, best valid (min for a loss) as numbers in the title
        state = app.state
        assert state.best_valid("loss") == pytest.approx(min(state.metric_series("loss", "valid").points()[1]))
        # the latest train loss and valid loss, at 4 digits, or 3 where 4 would not fit the chart's width
        shown = lambda v: any(short(v, d) in loss.title_text for d in (4, 3))  # noqa: E731
        assert shown(state.latest["train/loss"]) and shown(state.metric_series("loss", "valid").last[1])
        # all of it shown: no … (a scrollbar that comes and goes while the charts fill in narrows them for
        # a moment; the title follows the width at the next relayout, which this waits for)
        await until(pilot, lambda: len(loss.title_text) <= loss.outer_size.width - 6, timeout=10)
        # the best value: in the title, or in the bottom border where the title has no room for it in words
        assert "best" in loss.title_text or "★" in loss.title_text or "best" in str(loss.border_subtitle)


@sync
async def test_small_values_stay_readable_in_titles():
    ev = four_metrics()
    app = make_app(ev)
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, lambda: "lr" in grid(app).charts and grid(app).charts["lr"].points)
        assert "0.001" in grid(app).charts["lr"].title_text
        app.state.apply([MetricsLogged(split="train", epoch=4, step=41, metrics={"lr": 3.2e-05}, time=T0 + 41)])
        grid(app).show(app.state)
        assert "3.2e-05" in grid(app).charts["lr"].title_text


@sync
async def test_titles_fit_their_chart_with_three_digits_when_four_do_not():
    ev = four_metrics()
    ev.append(MetricsLogged(split="train", epoch=4, step=41, metrics={"accuracy": 0.99687}, time=T0 + 41))
    ev.append(
        MetricsLogged(split="valid", epoch=4, step=41, scope="epoch", metrics={"accuracy": 0.99317}, time=T0 + 41)
    )
    app = make_app(ev)
    async with app.run_test(size=(118, 40)) as pilot:
        await until(pilot, lambda: "accuracy" in grid(app).charts and grid(app).charts["accuracy"].points)
        await pilot.pause()
        chart = grid(app).charts["accuracy"]
        # the numbers at four digits do not fit half of 118 columns less the side panels: all stay, at three
        assert len(chart.title_text) <= chart.outer_size.width - 6, chart.title_text  # no …
        best = short(app.state.best_valid("accuracy"), 3)
        # in words (the best value in the bottom border): "accuracy train 0.997 valid 0.993"
        assert "train 0.997" in chart.title_text and "valid 0.993" in chart.title_text, chart.title_text
        assert f"best {best}" in str(chart.border_subtitle)


@sync
async def test_tab_shift_tab_arrows_and_click_move_the_focus():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        await pilot.pause()
        g = grid(app)
        names = list(g.charts)
        assert names == ["loss", "accuracy", "lr", "grad_norm"]
        # no chart has the focus at the start (as in a terminal; the keys act on the first chart): Tab
        # focuses the first one, wherever the focus was (the side column, or nothing)
        assert not isinstance(app.focused, MetricPlot)
        await pilot.press("tab")
        assert app.focused is g.charts["loss"]
        await pilot.press("tab")
        assert app.focused is g.charts["accuracy"]
        await pilot.press("shift+tab")
        assert app.focused is g.charts["loss"]
        assert g.columns == 2
        await pilot.press("down")  # one row down: the chart under it
        assert app.focused is g.charts["lr"]
        await pilot.press("right")
        assert app.focused is g.charts["grad_norm"]
        await pilot.press("up")
        assert app.focused is g.charts["accuracy"]
        await pilot.press("left", "left")  # wraps
        assert app.focused is g.charts["grad_norm"]
        await pilot.click(g.charts["lr"])
        assert app.focused is g.charts["lr"]


@sync
async def test_enter_shows_the_focused_chart_alone_and_enter_or_esc_goes_back():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        await pilot.press("tab", "tab")  # the first chart, then the second
        chart = grid(app).charts["accuracy"]
        small = chart.region.size
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.maximized is chart and chart.region.width == 120 and chart.region.height >= 38
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.maximized is None and chart.region.size == small
        await pilot.press("enter", "escape")
        await pilot.pause()
        assert app.screen.maximized is None


@sync
async def test_l_toggles_log_scale_and_leaves_out_nan_inf_and_non_positive_values():
    ev = four_metrics(20)
    bad = [float("nan"), float("inf"), -1.0, 0.0, float("-inf"), 1e-300]
    for i, v in enumerate(bad):
        ev.append(
            MetricsLogged(split="train", epoch=2, step=21 + i, metrics={"loss": v, "grad_norm": -v}, time=T0 + 21 + i)
        )
    app = make_app(ev)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4 and grid(app).charts["loss"].points)
        loss = grid(app).charts["loss"]
        linear = len(loss.points["train"][0])
        await pilot.press("l")
        assert loss.log_scale and "log" in loss.border_subtitle
        xs, ys = loss.points["train"]
        assert all(y > 0 and math.isfinite(y) for y in ys)
        assert len(xs) == linear - 2  # -1 and 0 go on a log scale (NaN and inf never reach a series)
        assert "not drawn" in loss.border_subtitle
        assert "┤" in shown(loss)  # a y axis was drawn: the figure built
        await pilot.press("shift+tab", "l")  # grad_norm: all of its last values are <= 0 or not finite
        g = grid(app).charts["grad_norm"]
        assert g.log_scale and all(y > 0 for y in g.points["train"][1])
        await pilot.press("tab", "l")
        assert not loss.log_scale and len(loss.points["train"][0]) == linear


@sync
async def test_log_scale_on_a_series_with_nothing_positive_draws_an_empty_chart():
    ev = four_metrics(5)
    ev += [
        MetricsLogged(split="train", epoch=1, step=6 + i, metrics={"margin": -1.0 - i}, time=T0 + 6 + i)
        for i in range(5)
    ]
    app = make_app(ev)
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, lambda: "margin" in grid(app).charts and grid(app).charts["margin"].points)
        margin = grid(app).charts["margin"]
        margin.focus()
        await pilot.press("l")
        await pilot.pause()
        assert margin.points == {} and "waiting for values" in shown(margin)
        assert app.is_running


@sync
async def test_s_cycles_smoothing_and_keeps_the_raw_series():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        loss = grid(app).charts["loss"]
        seen = []
        for _ in range(4):
            await pilot.press("s")
            seen.append(loss.smoothing)
        assert seen == [0.6, 0.9, 0.99, 0.0]
        await pilot.press("s", "s")  # 0.9
        raw_x, raw_y = loss.points["train"]
        sm_x, sm_y = loss.smoothed["train"]
        assert len(raw_x) == 40 and sm_x == raw_x
        assert sm_y[0] == pytest.approx(raw_y[0])  # debiased: starts at the first value
        assert sm_y[-1] > raw_y[-1]  # a falling curve: the average lags above it
        assert "EMA 0.9" in loss.border_subtitle
        assert "valid" not in loss.smoothed  # only the training series is smoothed


@sync
async def test_x_cycles_the_axes_the_run_has():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        loss = grid(app).charts["loss"]
        axes = []
        for _ in range(4):
            await pilot.press("x")
            axes.append(loss.x_axis)
        assert axes == ["epoch", "time", "samples", "step"]
        await pilot.press("x")  # epoch: step 40 is the end of epoch 4, step 5 half of epoch 1
        xs = loss.points["train"][0]
        assert xs[4] == pytest.approx(0.5) and xs[-1] == pytest.approx(4.0)
        assert loss.points["valid"][0] == pytest.approx([1.0, 2.0, 3.0, 4.0])
        await pilot.press("x")  # wall time: seconds since the start
        assert loss.points["train"][0][-1] == pytest.approx(40.0)
        await pilot.press("x")  # samples: steps times the batch size
        assert loss.points["train"][0][-1] == pytest.approx(40 * 32)
        assert "x samples" in loss.border_subtitle


@sync
async def test_w_shows_the_most_recent_steps_even_of_a_short_run():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        loss = grid(app).charts["loss"]
        await pilot.press("w")
        xs = loss.points["train"][0]
        assert loss.window == "recent" and xs == list(range(31, 41))  # the newest quarter (at least 10)
        assert loss.points["valid"][0] == [40]  # valid points before the window are left out
        await pilot.press("w")
        assert loss.window == "full" and len(loss.points["train"][0]) == 40


@sync
async def test_slash_filters_charts_by_regular_expression_and_a_bad_one_is_named():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        await pilot.press("slash")
        assert isinstance(app.screen, FilterScreen)
        await pilot.press(*"loss|acc", "enter")
        await pilot.pause()
        assert [c.chart for c in grid(app).visible()] == ["loss", "accuracy"]
        await pilot.press("slash")
        await pilot.press(*"([", "enter")  # adds to "loss|acc": "loss|acc(["
        await pilot.pause()
        assert isinstance(app.screen, FilterScreen)  # stays open, saying why
        assert "not a regular expression" in shown(app.screen.query_one("#filter-error"))
        await pilot.press("escape")
        assert not isinstance(app.screen, FilterScreen) and app.is_running
        assert [c.chart for c in grid(app).visible()] == ["loss", "accuracy"]  # unchanged
        await pilot.press("slash", *["backspace"] * 10, "enter")  # empty: all
        await pilot.pause()
        assert len(grid(app).visible()) == 4
        await pilot.press("slash", *"nothing", "enter")
        await pilot.pause()
        assert grid(app).visible() == [] and app.is_running


@sync
async def test_e_exports_the_screen_and_every_series_and_the_csv_reads_back(tmp_path):
    app = make_app(four_metrics(run_dir=str(tmp_path)), controller=RecordingController())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        await pilot.press("e")
        await until(pilot, lambda: app.last_export is not None)
        folder = app.last_export
        assert folder.parent == tmp_path / "exports"
        assert "exported to" in shown(app.query_one("#notice"))
        svg = (folder / "screen.svg").read_text()
        assert svg.startswith("<svg") and "loss" in svg
        names = sorted(p.name for p in folder.glob("*.csv"))
        assert names == [
            "train-step-accuracy.csv",
            "train-step-grad_norm.csv",
            "train-step-loss.csv",
            "train-step-lr.csv",
            "valid-epoch-accuracy.csv",
            "valid-epoch-loss.csv",
        ]
        with open(folder / "train-step-loss.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == ["step", "epoch", "time", "samples", "loss"]
        assert [int(r["step"]) for r in rows] == list(range(1, 41))
        assert float(rows[-1]["loss"]) == app.state.latest["train/loss"]  # written exactly
        assert float(rows[-1]["epoch"]) == 4.0 and float(rows[-1]["samples"]) == 40 * 32
        await pilot.press("e")  # a second export in the same second gets its own folder
        await until(pilot, lambda: app.last_export != folder)
        assert app.last_export.name == folder.name + "-2"


@sync
async def test_export_without_a_run_directory_says_so():
    ev = four_metrics(run_dir="")
    app = make_app(ev)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        await pilot.press("e")
        await pilot.pause()
        assert app.last_export is None and app.is_running


@sync
async def test_metrics_sharing_a_suffix_share_a_chart():
    ev = [RunStarted(run_dir="", experiment="gan", epochs=1, max_steps=0, steps_per_epoch=10, batch_size=8, time=T0)]
    ev += [
        MetricsLogged(split="train", epoch=1, step=s, metrics={"g_loss": 1.0 / s, "d_loss": 0.5}, time=T0 + s)
        for s in range(1, 11)
    ]
    app = make_app(ev)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: grid(app).charts and all(c.points for c in grid(app).charts.values()))
        assert list(grid(app).charts) == ["*_loss"]
        chart = grid(app).charts["*_loss"]
        assert set(chart.points) == {"train/g_loss", "train/d_loss"}
        assert "g_loss" in chart.title_text and "d_loss" in chart.title_text and "0.5" in chart.title_text


@sync
async def test_header_says_completed_after_the_run_not_live():
    app = make_app(recorded_run(epochs=1, end="completed"), controller=RecordingController())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.state.ended)
        await until(pilot, lambda: "[completed]" in shown(app.query_one("#title-bar")))
        assert "[live]" not in shown(app.query_one("#title-bar"))


@sync
async def test_all_chart_widgets_are_metric_plots():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        on_screen = list(app.query(".chart"))
        # every chart is a MetricPlot itself (bench_all.py times MetricPlot from this import path)
        assert len(on_screen) == 4 and all(type(c) is MetricPlot for c in on_screen)
        assert set(on_screen) == set(grid(app).charts.values())
    from tuitrain.dashboard.charts import plan as charts
    from tuitrain.dashboard.charts.metric_plot import thin

    assert thin is charts.thin  # the older import path (benchmarks) gives the same function
