"""`tuitrain watch SWEEP_DIR`: the trials of a sweep compared, and a trial that starts while the
dashboard is open joins the run list and the charts without a restart. Each trial's row: its number,
its searched values (sweep.json's "params"), its status (pruned: run.json interrupted, reason pruned)
and its best value of sweep.json's "metric".

The sweep folder is written by hand as `tuitrain sweep` leaves it: sweep.json, and each trial a run
directory whose events.jsonl and run.json are written by the run's own sinks (`JsonlWriter`,
`RunStatusWriter`) from events of the shapes a real trial of demo/spirals.toml records."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tuitrain.core.events import (
    CheckpointSaved,
    CheckpointStarted,
    ControlReceived,
    EpochCompleted,
    EpochStarted,
    MetricsLogged,
    PhaseCompleted,
    PhaseStarted,
    RunFinished,
    RunStarted,
)
from tuitrain.dashboard.entry import sweep_app
from tuitrain.dashboard.state.compare import RunAdded
from tuitrain.dashboard.state.sweep import SweepState, TrialChecked, column_heads
from tuitrain.sources.sweep_files import read_sweep
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.panels.run_list import RunList
from tuitrain.sinks.jsonl import JsonlWriter
from tuitrain.sinks.run_status import RunStatusWriter

from .fixtures import T0
from .test_app import SIZE, sync, until

STEPS = 25  # steps per epoch, as demo/spirals.toml's 2000 points in batches of 64 make them


def write_sweep(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep.json").write_text(
        json.dumps(
            {
                "name": "spirals",
                "config": "/tmp/sweep.toml",
                "metric": "valid/accuracy",
                "mode": "max",
                "trials": 3,
                "params": ["optimizer.lr", "model.hidden"],
                "storage": str(folder / "study.journal"),
            },
            indent=2,
        )
        + "\n"
    )


def write_trial(folder: Path, number: int, lr: float, hidden: int, valid: list[float], end: str | None) -> Path:
    """trial-NNNN/ as a trial leaves it: config.toml, events.jsonl and run.json, one validation per value of
    `valid` (valid/accuracy); `end`: "completed", "pruned" (stopped by the pruner), None (still running:
    run.json's pid is this process)."""
    run_dir = folder / f"trial-{number:04d}"
    run_dir.mkdir(parents=True)
    config = {
        "experiment": {"name": "spirals", "dir": "runs", "seed": 42},
        "model": {"target": "spirals:SpiralNet", "hidden": hidden, "depth": 3},
        "optimizer": {"name": "AdamW", "lr": lr, "weight_decay": 0.01},
        "train": {"epochs": 5, "validate_every": 1},
        "checkpoint": {"monitor": "valid/accuracy", "mode": "max"},
    }
    (run_dir / "config.toml").write_text(
        '[experiment]\nname = "spirals"\ndir = "runs"\nseed = 42\n\n'
        f'[model]\ntarget = "spirals:SpiralNet"\nhidden = {hidden}\ndepth = 3\n\n'
        f'[optimizer]\nname = "AdamW"\nlr = {lr!r}\nweight_decay = 0.01\n\n'
        '[train]\nepochs = 5\nvalidate_every = 1\n\n[checkpoint]\nmonitor = "valid/accuracy"\nmode = "max"\n'
    )
    jsonl, status = JsonlWriter(run_dir, background=False), RunStatusWriter(run_dir)
    t = T0 + 100 * number

    def emit(event) -> None:
        jsonl(event)
        status(event)

    emit(
        RunStarted(
            run_dir=str(run_dir),
            experiment="spirals",
            epochs=5,
            max_steps=0,
            steps_per_epoch=STEPS,
            batch_size=64,
            pid=os.getpid(),
            env={"python": "3.11.7", "device": "cpu"},
            config=config,
            time=t,
        )
    )
    step, best = 0, None
    for epoch, accuracy in enumerate(valid, start=1):
        emit(EpochStarted(epoch=epoch, epochs=5, step=step, time=t))
        emit(PhaseStarted(phase="train", split="train", epoch=epoch, step=step, batches=STEPS, time=t))
        for batch in range(10, STEPS + 1, 10):
            t += 0.1
            emit(
                MetricsLogged(
                    split="train",
                    epoch=epoch,
                    step=step + batch,
                    batch=batch,
                    batches=STEPS,
                    metrics={"loss": 0.7 - 0.01 * (step + batch) / STEPS, "accuracy": accuracy - 0.02},
                    time=t,
                )
            )
        step += STEPS
        emit(
            PhaseCompleted(
                phase="train", split="train", epoch=epoch, step=step, metrics={}, duration=1.0, items=STEPS * 64, time=t
            )
        )
        emit(PhaseStarted(phase="valid", split="valid", epoch=epoch, step=step, batches=7, time=t))
        metrics = {"loss": 0.69 - accuracy / 10, "accuracy": accuracy}
        emit(MetricsLogged(split="valid", epoch=epoch, step=step, scope="epoch", metrics=metrics, time=t))
        emit(
            PhaseCompleted(
                phase="valid", split="valid", epoch=epoch, step=step, metrics=metrics, duration=0.1, items=400, time=t
            )
        )
        emit(
            EpochCompleted(epoch=epoch, epochs=5, step=step, metrics={"valid/accuracy": accuracy}, duration=1.1, time=t)
        )
        emit(CheckpointStarted(epoch=epoch, step=step, reason="epoch", time=t))
        is_best = best is None or accuracy > best
        best = accuracy if is_best else best
        emit(
            CheckpointSaved(
                file=f"checkpoint/epoch-{epoch:04d}-step-{step:08d}.pt",
                epoch=epoch,
                step=step,
                metrics={"valid/accuracy": accuracy},
                bytes=133693,
                best=is_best,
                reason="epoch",
                stall=0.001,
                write=0.004,
                time=t,
            )
        )
    if end == "completed":
        emit(
            RunFinished(
                status="completed",
                exit_code=0,
                epoch=len(valid),
                step=step,
                reason="epochs",
                duration=5.0,
                summary={},
                best={},
                time=t,
            )
        )
    elif end == "pruned":
        emit(ControlReceived(command="stop", source="pruned", time=t))
        emit(
            RunFinished(
                status="interrupted",
                exit_code=130,
                epoch=len(valid),
                step=step,
                reason="pruned",
                duration=3.0,
                summary={},
                best={},
                time=t,
            )
        )
    jsonl.close()
    status.close()
    return run_dir


def rows(app) -> dict:
    """The run list's rows by trial number."""
    return {r.number: r for r in app.query_one(RunList).runs}


def row_text(app, number: int) -> str:
    run_list = app.query_one(RunList)
    k = [r.number for r in run_list.runs].index(number)
    return " ".join(str(cell) for cell in run_list.get_row_at(k))


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    folder = tmp_path / "runs" / "spirals" / "sweep-spirals"
    write_sweep(folder)
    return folder


@sync
async def test_a_trial_that_starts_while_watching_joins_with_its_values_status_and_best(sweep_dir):
    write_trial(sweep_dir, 0, lr=0.0031, hidden=64, valid=[0.61, 0.83, 0.79], end="completed")
    write_trial(sweep_dir, 1, lr=0.02, hidden=16, valid=[0.55], end=None)
    app = sweep_app(sweep_dir, None)
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot,
            lambda: (
                [(n, r.status) for n, r in rows(app).items()] == [(0, "completed"), (1, "running")]
                and rows(app)[1].value is not None
            ),
        )
        assert rows(app)[0].values == ("0.0031", "64") and rows(app)[0].value == pytest.approx(0.83)
        assert rows(app)[0].best  # the best completed trial is starred

        # a third trial, pruned at its second validation, starts (and ends) while the dashboard is open
        write_trial(sweep_dir, 2, lr=0.000123, hidden=16, valid=[0.5, 0.52], end="pruned")
        began = time.monotonic()
        await until(
            pilot,
            lambda: 2 in rows(app) and rows(app)[2].status == "pruned" and rows(app)[2].value is not None,
            timeout=10,
        )
        assert time.monotonic() - began < 5  # the sweep source looks every second
        new = rows(app)[2]
        assert new.values == ("0.000123", "16") and new.value == pytest.approx(0.52) and not new.best
        shown = row_text(app, 2)
        for word in ("━2", "0.000123", "16", "pruned", "0.52"):
            assert word in shown, shown
        heads = [str(c.label).strip() for c in app.query_one(RunList).columns.values()]
        assert heads == ["", "lr", "hidden", "status", "accuracy"], heads

        # and in the charts: its valid accuracy in the accuracy chart, beside the others'
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: "valid/trial-0002" in grid.charts.get("accuracy").points)
        assert {"valid/trial-0000", "valid/trial-0001"} <= set(grid.charts["accuracy"].points)
        title = str(app.query_one("#title-bar").render())
        assert "3 trials: 1 running, 1 completed, 1 pruned" in title and "best ━0 0.83" in title, title

        # v sorts by the best value, the sweep's way (max: highest first)
        await pilot.press("R", "v")
        await pilot.pause()
        assert [r.number for r in app.query_one(RunList).runs] == [0, 1, 2]
        assert [round(r.value, 2) for r in app.query_one(RunList).runs] == [0.83, 0.55, 0.52]
        await pilot.press("q")


@sync
async def test_a_sweep_without_trials_yet_opens_and_takes_its_first_trial(sweep_dir):
    app = sweep_app(sweep_dir, None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert "0 trials yet" in str(app.query_one("#title-bar").render())
        assert app.query_one(RunList).runs == []
        write_trial(sweep_dir, 0, lr=0.01, hidden=64, valid=[0.7], end="completed")
        await until(pilot, lambda: rows(app).get(0) is not None and rows(app)[0].status == "completed", timeout=10)
        assert rows(app)[0].value == pytest.approx(0.7) and rows(app)[0].values == ("0.01", "64")
        await until(pilot, lambda: "accuracy" in app.query_one(ChartGrid).charts)
        await pilot.press("q")


def test_sweep_json_damaged_or_partial_takes_defaults(tmp_path):
    (tmp_path / "sweep-x").mkdir()
    assert read_sweep(tmp_path / "sweep-x").name == "x" and read_sweep(tmp_path / "sweep-x").params == ()
    (tmp_path / "sweep-x" / "sweep.json").write_text('{"metric": 3, "mode": "sideways", "params": ["a.lr", 7]}')
    info = read_sweep(tmp_path / "sweep-x")
    assert (info.metric, info.mode, info.params) == ("", "min", ("a.lr",))
    # column names: each key's last part, longer where two share one
    assert column_heads(["optimizer.lr", "model.dropout", "data.dropout"]) == ["lr", "model.dropout", "data.dropout"]
    assert SweepState(info, []).headline() == "sweep x · 0 trials yet"


def test_a_trial_whose_process_is_gone_before_its_end_is_killed(sweep_dir):
    state = SweepState(read_sweep(sweep_dir), [])
    state.apply([RunAdded("trial-0004", sweep_dir / "trial-0004", {"optimizer": {"lr": 0.5}}, 4)])
    assert state.status_of("trial-0004") == "running" and state.values_of("trial-0004") == ["0.5", "-"]
    state.apply([TrialChecked("trial-0004", "killed")])
    assert state.status_of("trial-0004") == "killed" and state.number["trial-0004"] == 4
