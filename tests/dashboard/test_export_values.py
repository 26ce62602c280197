"""`e` during a live run: every logged value in the CSVs (the run's events.jsonl read back, not the chart's
buckets), and the samples axis true at each logged step, on screen (`x`) as in the CSV, though a live
run's screen gets a step event only now and then (each carrying the items since the one before)."""

from __future__ import annotations

import csv

import pytest

from tuitrain.core.events import MetricsLogged, RunStarted, StepCompleted

from .fixtures import T0, write_jsonl
from .test_app import RecordingController, make_app, sync, until
from .test_chart_keys import grid

BATCH = 64


def live_run(steps: int, run_dir: str = "", sampled: tuple[int, ...] = (1, 2, 3)) -> list:
    """A live run logging loss at every step (100 steps an epoch, batch 64, a second a step), its step
    events sampled as a live screen gets them: at the steps in `sampled` and every 25th, each after
    that step's metrics and carrying the items of every step since the last one."""
    ev: list = [
        RunStarted(
            run_dir=run_dir, experiment="e", epochs=0, max_steps=0, steps_per_epoch=100, batch_size=BATCH, time=T0
        )
    ]
    last = 0
    for s in range(1, steps + 1):
        epoch, batch = (s - 1) // 100 + 1, (s - 1) % 100 + 1
        metrics = {"loss": 1 / s + s * 1e-9}  # every value its own: none can stand for another
        ev.append(
            MetricsLogged(split="train", epoch=epoch, step=s, batch=batch, batches=100, metrics=metrics, time=T0 + s)
        )
        if s in sampled or s % 25 == 0:
            ev.append(StepCompleted(phase="train", epoch=epoch, step=s, batch=batch - 1, items=(s - last) * BATCH))
            last = s
    return ev


def rows_of(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@sync
async def test_the_samples_axis_is_step_times_batch_at_every_logged_step_on_screen_and_in_the_csv(tmp_path):
    app = make_app(live_run(50, run_dir=str(tmp_path)), controller=RecordingController())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.state.step == 50 and "loss" in grid(app).charts)
        loss = grid(app).charts["loss"]
        for _ in range(3):  # epoch, time, samples
            await pilot.press("x")
        assert loss.x_axis == "samples"
        await until(pilot, lambda: len(loss.points["train"][0]) == 50)
        assert loss.points["train"][0] == pytest.approx([s * BATCH for s in range(1, 51)])  # step 10: 640, not 192
        await pilot.press("e")
        await until(pilot, lambda: app.last_export is not None)
        rows = rows_of(app.last_export / "train-step-loss.csv")
        assert [float(r["samples"]) for r in rows] == [s * BATCH for s in range(1, 51)]


@sync
async def test_a_live_export_holds_every_logged_value_and_its_true_axes(tmp_path):
    events = live_run(2500, run_dir=str(tmp_path))
    written = [e for e in events if not isinstance(e, MetricsLogged) or e.step <= 2490]
    write_jsonl(tmp_path / "events.jsonl", written)  # the run's file, a moment behind its screen
    app = make_app(events, controller=RecordingController())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.state.step == 2500 and "loss" in grid(app).charts)
        assert len(app.state.series[("train", "step", "loss")].points()[0]) < 2000  # the chart's: buckets
        await pilot.press("e")
        await until(pilot, lambda: app.last_export is not None, timeout=30)
        rows = rows_of(app.last_export / "train-step-loss.csv")
    assert list(rows[0]) == ["step", "epoch", "time", "samples", "loss"]
    assert [int(r["step"]) for r in rows] == list(range(1, 2501))  # the last 10 from the screen
    assert [float(r["loss"]) for r in rows] == [1 / s + s * 1e-9 for s in range(1, 2501)]  # exactly
    assert [float(r["samples"]) for r in rows] == [s * BATCH for s in range(1, 2501)]
    assert [float(r["time"]) for r in rows[:2490]] == pytest.approx(range(1, 2491))
    assert [float(r["epoch"]) for r in rows[:2490]] == pytest.approx([s / 100 for s in range(1, 2491)])


def test_a_resumed_run_read_from_its_file_counts_samples_on_past_the_resume():
    """Read from events.jsonl (no step events): the second session's steps are step x batch too, not the
    first session's count held flat."""
    from tuitrain.dashboard.state.model import DashboardState

    def session(start: int, end: int) -> list:
        started = RunStarted(
            run_dir="r", experiment="e", epochs=0, max_steps=0, steps_per_epoch=100, batch_size=BATCH,
            start_step=start, resumed_from="r/checkpoint/x.pt" if start else "", time=T0 + start,
        )  # fmt: skip
        logged = [
            MetricsLogged(split="train", epoch=1, step=s, batch=s, batches=100, metrics={"loss": 1.0}, time=T0 + s)
            for s in range(start + 1, end + 1)
        ]
        return [started, *logged]

    state = DashboardState()
    state.apply(session(0, 10) + session(10, 20))
    assert [state.axes["samples"](s) for s in range(1, 21)] == [s * BATCH for s in range(1, 21)]
