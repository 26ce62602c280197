"""The chart kind "band" (tuitrain/dashboard/charts/band_plot.py), a kind registered from its own module
alone: a training metric's min and max over a rolling window of steps, made when a filter names it
(`/band`), its window cycled by `s`, inspected by `i`, gone again under a filter for the metric alone."""

from __future__ import annotations

import random

from tuitrain.core.events import MetricsLogged, RunStarted
from tuitrain.dashboard.charts.band_plot import BandPlot, rolling_band
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.charts.kinds import chart_kinds
from tuitrain.dashboard.charts.plan import short

from .fixtures import T0
from .test_app import make_app, sync, until

STEPS = 120


def noisy(step: int) -> float:
    """A falling loss with a swing of its own at each step (what a per-batch loss looks like)."""
    return 2.0 / (1 + step / 10) + 0.25 * ((step * 7) % 5) / 4


def noisy_run() -> list:
    ev = [
        RunStarted(
            run_dir="runs/band/1",
            experiment="band",
            epochs=1,
            max_steps=0,
            steps_per_epoch=STEPS,
            batch_size=8,
            time=T0,
        )
    ]
    for s in range(1, STEPS + 1):
        metrics = {"loss": noisy(s), "lr": 1e-3}
        ev.append(MetricsLogged(split="train", epoch=1, step=s, batch=s, batches=STEPS, metrics=metrics, time=T0 + s))
    ev.append(MetricsLogged(split="valid", epoch=1, step=STEPS, scope="epoch", metrics={"loss": 0.5}, time=T0 + STEPS))
    return ev


def by_hand(xs: list[float], ys: list[float], window: float) -> tuple[list[float], list[float]]:
    """The band the slow way: each point's window looked at whole."""
    lows, highs = [], []
    for x in xs:
        inside = [y for x2, y in zip(xs, ys) if x - window < x2 <= x]
        lows.append(min(inside))
        highs.append(max(inside))
    return lows, highs


def test_the_rolling_band_is_each_windows_min_and_max():
    rng = random.Random(53)
    for _ in range(50):
        xs = sorted(rng.sample(range(1, 400), rng.randint(1, 60)))
        ys = [rng.uniform(-5, 5) if rng.random() > 0.2 else rng.choice([0.0, 1.0]) for _ in xs]  # ties too
        window = rng.choice([1, 3, 10, 50, 1000])
        assert rolling_band([float(x) for x in xs], ys, window) == by_hand(xs, ys, window)


def test_the_band_is_a_registered_kind_after_the_others():
    names = [kind.name for kind in chart_kinds()]
    assert names[:3] == ["lines", "devices", "histograms"] and "band" in names


@sync
async def test_slash_band_shows_each_metrics_band_s_widens_it_i_reads_it_and_slash_loss_hides_it():
    app = make_app(noisy_run())
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(
            pilot, lambda: "loss" in grid.charts and len(grid.charts["loss"].points.get("train", ([],))[0]) == STEPS
        )
        assert not any(isinstance(c, BandPlot) for c in grid.charts.values())  # none made without a filter
        shown_before = [c.chart for c in grid.visible()]
        assert shown_before == ["loss", "lr"]

        await pilot.press("slash", *"band", "enter")
        await until(pilot, lambda: ("band", "band/loss") in grid.charts and grid.charts[("band", "band/loss")].points)
        await pilot.pause()
        assert [c.chart for c in grid.visible()] == ["band/loss", "band/lr"]  # the metrics' own charts hidden
        band = grid.charts[("band", "band/loss")]
        assert isinstance(band, BandPlot)
        xs = [float(s) for s in range(1, STEPS + 1)]
        ys = [noisy(s) for s in range(1, STEPS + 1)]
        lows, highs = by_hand(xs, ys, 50)
        assert band.points["min"] == (xs, lows) and band.points["max"] == (xs, highs)
        assert lows[-1] < highs[-1]  # a real swing: the band has a width
        assert f"min {short(lows[-1])} · max {short(highs[-1])}" in band.title_text
        assert band.border_subtitle == "50 steps"
        assert band.drawn.x is not None  # drawn on screen

        band.focus()
        await pilot.press("s")  # the window: 200 steps, wider than the run
        await pilot.pause()
        assert band.border_subtitle == "200 steps"
        assert band.points["min"][1] == [min(ys[: i + 1]) for i in range(STEPS)]
        assert band.points["max"][1][-1] == max(ys)

        await pilot.press("i")  # inspect: the newest step, its min and max
        await until(pilot, lambda: band.readout_text)
        step, values = band.readout()
        assert step == STEPS
        assert {line.key: v for line, v in values} == {"max": max(ys), "min": min(ys)}
        assert "max" in band.readout_text and "min" in band.readout_text
        await pilot.press("escape")

        await pilot.press("slash", *["backspace"] * 4, *"loss", "enter")  # the metric alone: its own chart
        await until(pilot, lambda: ("band", "band/loss") not in grid.charts)
        await pilot.pause()
        assert [c.chart for c in grid.visible()] == ["loss"]
        assert not app.query(BandPlot)
