"""Inspect (`i`): a cursor on the focused chart, moved with ←/→ or a click, showing the step under it
and every series' value there: the newest logged point at or before that step (train, valid, the
smoothed one, each compared run). The values shown are checked against the series' own points."""

from __future__ import annotations

import bisect
import math

from tuitrain.core.events import MetricsLogged, RunStarted
from tuitrain.dashboard.charts.plan import short
from tuitrain.dashboard.state.compare import CompareState, Tagged

from .fixtures import T0
from .test_app import make_app, shown, sync, until
from .test_chart_keys import four_metrics, grid


def at_or_before(points: tuple[list[float], list[float]], x: float) -> float | None:
    xs, ys = points
    i = bisect.bisect_right(xs, x) - 1
    return ys[i] if i >= 0 else None


def values(chart) -> dict[str, float | None]:
    """What the readout says, by series key, as numbers."""
    _, read = chart.readout()
    return {line.key: value for line, value in read}


async def ready(app, pilot) -> None:
    await until(pilot, lambda: len(grid(app).charts) >= 4 and all(c.points for c in grid(app).charts.values()))
    await pilot.pause()


@sync
async def test_i_shows_the_step_and_every_value_there_and_arrows_move_the_cursor():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        loss = grid(app).charts["loss"]
        assert not loss.inspecting
        await pilot.press("i")  # no chart has the focus yet: the first one takes it, and the cursor
        await pilot.pause()
        assert app.focused is loss
        assert loss.inspecting and loss.cursor == 40  # the newest step first
        train = app.state.metric_series("loss", "train").points()
        valid = app.state.metric_series("loss", "valid").points()
        seen = [40.0]
        for _ in range(5):
            await pilot.press("left")
            await pilot.pause()
            seen.append(loss.cursor)
        await pilot.press("right")
        await pilot.pause()
        seen.append(loss.cursor)
        assert app.focused is loss  # the arrows moved the cursor, not the focus
        assert seen[:6] == sorted(seen[:6], reverse=True) and len(set(seen[:6])) == 6  # one column each
        assert seen[-1] > seen[-2]
        columns = [loss.drawn.x.cell(x) for x in seen[:6]]
        assert all(a - b >= 1 for a, b in zip(columns, columns[1:]))
        step, _ = loss.readout()
        assert step == loss.cursor and step in train[0]  # the cursor stands on a logged step
        got = values(loss)
        assert got["train"] == at_or_before(train, step)
        assert got["valid"] == at_or_before(valid, step)  # valid: the newest epoch's value at or before it
        assert got["valid"] != at_or_before(valid, 40)
        screen = shown(loss)
        assert f"step {step:,.0f}" in screen and f"step {step:,.0f}" in loss.readout_text
        assert short(got["train"], 4) in screen or short(got["train"], 3) in screen
        assert short(got["valid"], 4) in screen or short(got["valid"], 3) in screen
        cursor_column = loss.drawn.left + loss.drawn.x.cell(step)
        canvas = lambda text: [line[1:-1] for line in text.split("\n")[1:-1]]  # noqa: E731  (no border)
        assert sum(row[cursor_column] == "┃" for row in canvas(screen)) >= 3  # the line stands at the step
        await pilot.press("i")  # off
        await pilot.pause()
        assert not loss.inspecting and not any("┃" in row or "step" in row for row in canvas(shown(loss)))
        await pilot.press("right")  # the arrows move the focus again
        assert app.focused is grid(app).charts["accuracy"]


@sync
async def test_the_smoothed_series_is_read_too_and_esc_turns_the_cursor_off():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        loss = grid(app).charts["loss"]
        await pilot.press("s", "s", "i", "left", "left", "left")  # EMA 0.9
        await pilot.pause()
        step, _ = loss.readout()
        got = values(loss)
        assert got["train"] == at_or_before(app.state.metric_series("loss", "train").points(), step)
        assert got["~train"] == at_or_before(loss.smoothed["train"], step) != got["train"]
        assert "EMA" in loss.readout_text or "~" in loss.readout_text
        await pilot.press("escape")
        await pilot.pause()
        assert not loss.inspecting and app.is_running
        await pilot.press("enter", "i", "escape")  # alone, full size: Esc first ends inspecting, then the zoom
        await pilot.pause()
        assert app.screen.maximized is loss and not loss.inspecting
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None


@sync
async def test_a_click_puts_the_cursor_at_the_clicked_column_and_it_follows_the_focus():
    app = make_app(four_metrics())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        loss = grid(app).charts["loss"]
        await pilot.press("i")
        await pilot.pause()
        column = loss.drawn.x.cell(12)  # the canvas column of step 12
        await pilot.click(loss, offset=(1 + loss.drawn.left + column, 5))  # 1: the border
        await pilot.pause()
        assert loss.cursor == max(x for x in loss.points["train"][0] if loss.drawn.x.cell(x) <= column)
        assert loss.drawn.x.cell(loss.cursor) == column
        at = loss.cursor
        await pilot.press("tab")  # the focus moves on: the cursor with it, at the same step
        await pilot.pause()
        acc = grid(app).charts["accuracy"]
        assert not loss.inspecting and acc.inspecting and acc.cursor == at
        assert values(acc)["train"] == at_or_before(app.state.metric_series("accuracy", "train").points(), at)


@sync
async def test_compared_runs_each_show_their_value_at_the_cursor():
    names = ["run-a", "run-b"]
    events = []
    for i, name in enumerate(names):
        events.append(
            Tagged(
                RunStarted(
                    run_dir="", experiment="cmp", epochs=1, max_steps=0, steps_per_epoch=30, batch_size=8, time=T0
                ),
                name,
            )
        )
        for s in range(1, 31, 1 + i):  # run-b logs every other step: its value is the one before
            events.append(
                Tagged(
                    MetricsLogged(
                        split="train",
                        epoch=1,
                        step=s,
                        batch=s,
                        batches=30,
                        metrics={"loss": (i + 1) * math.exp(-s / 10)},
                        time=T0 + s,
                    ),
                    name,
                )
            )
    app = make_app(events)
    app.state = CompareState(names, clock=app.clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "loss" in grid(app).charts and len(grid(app).charts["loss"].points) == 2)
        await pilot.pause()
        loss = grid(app).charts["loss"]
        loss.focus()
        await pilot.press("i", "left", "left", "left")
        await pilot.pause()
        step, _ = loss.readout()
        got = values(loss)
        for i, name in enumerate(names):
            series = app.state.runs[name].metric_series("loss", "train").points()
            assert got[f"train/{name}"] == at_or_before(series, step)
        assert got["train/run-a"] != got["train/run-b"]
        assert "━1" in loss.readout_text and "━2" in loss.readout_text


def long_run(run_dir, slope: float, noise: int, steps: int = 30_000) -> None:
    """A run of `steps` logged steps as its JsonlWriter writes it (events.jsonl and events.columns): the
    loss at step s is slope * s, plus a deterministic wiggle of `noise` (0: none), so the charts keep
    bucket extremes only (1024 buckets), not every step."""
    from tuitrain.core.events import RunFinished

    from .test_scale import write_with_columns

    events = [
        RunStarted(
            run_dir=str(run_dir), experiment="long", epochs=1, max_steps=0, steps_per_epoch=steps, batch_size=8, time=T0
        )
    ]
    for s in range(1, steps + 1):
        wiggle = ((s * 7919) % 101) * noise
        events.append(
            MetricsLogged(
                split="train",
                epoch=1,
                step=s,
                batch=s,
                batches=steps,
                metrics={"loss": slope * s + wiggle},
                time=T0 + s / 100,
            )
        )
    events.append(
        RunFinished(
            status="completed",
            exit_code=0,
            reason="completed",
            duration=steps / 100,
            summary={},
            best={},
            epoch=1,
            step=steps,
            time=T0 + steps / 100 + 1,
        )
    )
    write_with_columns(run_dir, events, batch=250)


@sync
async def test_on_long_compared_runs_each_value_is_read_exactly_at_the_cursors_step_from_the_files(tmp_path):
    """The cursor stands on run-a's stored points (bucket extremes); run-b's chart points near there
    are some steps away, so its value is looked up in its events.columns: exactly slope * step."""
    from tuitrain.dashboard.entry import compare_app

    runs = [tmp_path / "run-a", tmp_path / "run-b"]
    long_run(runs[0], 1e-4, 1)
    long_run(runs[1], 1e-5, 0)
    app = compare_app(runs, None)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(
            pilot,
            lambda: (
                app.state.runs["run-b"].final
                and app.state.runs["run-a"].final
                and "loss" in grid(app).charts
                and len(grid(app).charts["loss"].points) == 2
            ),
            timeout=60,
        )
        await pilot.pause(0.3)
        loss = grid(app).charts["loss"]
        loss.focus()
        await pilot.press("i")
        b_steps = set(app.state.runs["run-b"].metric_series("loss", "train").points()[0])
        a_only = [x for x in app.state.runs["run-a"].metric_series("loss", "train").points()[0] if x not in b_steps]
        loss.inspect(a_only[len(a_only) // 2])  # where a click on that column puts it
        await pilot.pause()
        step, _ = loss.readout()
        got = values(loss)
        assert step == a_only[len(a_only) // 2] and step not in b_steps  # run-b's chart keeps no point here...
        assert got["train/run-b"] == 1e-5 * step  # ...and its value there is read exactly
        assert got["train/run-a"] == 1e-4 * step + ((int(step) * 7919) % 101)
        assert f"step {step:,.0f}" in loss.readout_text
