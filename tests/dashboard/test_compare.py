"""`tuitrain watch A B` (or an experiment folder): every chart overlays the runs, one colour each, `d`
lists the config keys that differ, and nothing is steered. Two real runs, recorded by the runner."""

from __future__ import annotations

import csv

import pytest

from tuitrain.cli import _watched_runs
from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.state.compare import CompareSource, CompareState, read_config, run_names
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.panels.control_bar import ControlBar
from tuitrain.dashboard.screens.diff_screen import DiffScreen
from tuitrain.run.runner import prepare_run

from .test_app import SIZE, sync, until


@pytest.fixture(scope="module")
def two_runs(make_tiny):
    import sys

    tiny = make_tiny("compare")
    runs = []
    try:
        for lr in ("0.05", "0.001"):
            run = prepare_run(tiny.config, [f"optimizer.lr={lr}", "train.epochs=2"], headless=True)
            assert run.execute() == 0
            runs.append(run.run_dir)
    finally:
        sys.modules.pop("tinyproj", None)
    return tiny, runs


def compare_app(runs):
    names = run_names(runs)
    app = DashboardApp(CompareSource(runs, names), None, watch=True)
    app.state = CompareState(names, {n: read_config(r) for n, r in zip(names, runs)}, clock=app.clock)
    return app, names


@sync
async def test_every_chart_overlays_the_runs_and_d_shows_the_lr_difference(two_runs):
    _, runs = two_runs
    app, names = compare_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: "loss" in grid.charts and len(grid.charts["loss"].points) == 4)
        loss = grid.charts["loss"]
        assert set(loss.points) == {f"{split}/{name}" for split in ("train", "valid") for name in names}
        # each run in its own colour, named in the legend (the title bar) and numbered in the chart title
        assert loss.key_colors[f"train/{names[0]}"] != loss.key_colors[f"train/{names[1]}"]
        legend = str(app.query_one("#title-bar").render())
        assert names[0] in legend and names[1] in legend
        assert "━1" in loss.title_text and "━2" in loss.title_text
        # the numbers say what they are (each run's latest train value; ★ its best valid one where there is room)
        assert loss.title_text.startswith("loss train"), loss.title_text
        # the two learning rates trained differently
        first, second = (loss.points[f"train/{n}"][1][-1] for n in names)
        assert first != second
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen))
        rows = dict(app.screen.rows)
        assert rows["optimizer.lr"] == ["0.05", "0.001"]
        assert "experiment.seed" not in rows  # only what differs
        await pilot.press("escape")
        assert not isinstance(app.screen, DiffScreen)
        await pilot.press("l")  # the reading tools work across the runs
        assert grid.current().log_scale
        # the keys that steer are off: not in the footer, no buttons; Ctrl+C leaves
        shown = {b.binding.description for b in app.screen.active_bindings.values() if b.binding.show}
        assert {"Checkpoint", "Pause", "Stop now"}.isdisjoint(shown) and "Leave" in shown, shown
        assert not app.query_one(ControlBar).display
        await pilot.press("c", "p")  # nothing is steered: no control file reaches either run
        await pilot.pause(0.2)
        for run in runs:
            control = run / "control"
            assert not control.exists() or not any(control.iterdir())
        await pilot.press("e")
        await until(pilot, lambda: app.last_export is not None)
        folder = app.last_export
        assert (folder / "screen.svg").exists()
        # each run's series in its own subfolder, read back: the two runs' losses as the charts hold them
        for name in names:
            with open(folder / name / "train-step-loss.csv", newline="") as f:
                rows = list(csv.reader(f))
            assert rows[0][0] == "step" and rows[0][-1] == "loss"
            assert float(rows[-1][-1]) == loss.points[f"train/{name}"][1][-1]
        with open(folder / "config-differences.csv", newline="") as f:
            table = {row[0]: row[1:] for row in csv.reader(f)}
        assert table["config key"] == names and table["optimizer.lr"] == ["0.05", "0.001"]
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)


def test_an_experiment_folder_means_all_its_runs(two_runs):
    tiny, runs = two_runs
    found = [ref.path for ref in _watched_runs([str(runs[0].parent)])]  # (RunRefs: tuitrain/sources/refs.py)
    assert sorted(p.resolve() for p in found) == sorted(p.resolve() for p in runs)
    assert len(_watched_runs([str(runs[0]), str(runs[0])])) == 1  # named twice: shown once
    assert _watched_runs([str(tiny.root / "nothing-here")]) == 2
