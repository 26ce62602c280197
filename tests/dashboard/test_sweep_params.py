"""A sweep's parameters view (`P` on `tuitrain watch SWEEP_DIR`): each trial's best value against each
searched parameter, laid out as the config's `[sweep.params]` says (a log axis in decades, a choice's
values evenly spaced and named) or, without it, as the values suggest; the trials as parallel
coordinates; the best trial marked ★ and named; the view follows trials that end while it is open.

The sweep folder is written by hand as tests/dashboard/test_sweep_watch.py writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuitrain.dashboard.entry import sweep_app
from tuitrain.dashboard.state.params import ParamAxis, TrialPoint, param_axes, parallel, searched
from tuitrain.dashboard.screens.screen import DashboardScreen
from tuitrain.dashboard.screens.params_screen import ParallelPlot, ParamPlot, ParamsScreen

from .test_app import SIZE, sync, until
from .test_sweep_watch import write_sweep, write_trial

SEARCHED = """[sweep]
trials = 8
[sweep.params]
"optimizer.lr" = { low = 1e-4, high = 1e-1, log = true }
"model.hidden" = { choices = [16, 32, 64] }
"""


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    """Three trials: 0 completed (the best, 0.83), 1 running, 2 pruned; sweep.json names its config,
    whose [sweep.params] searches lr on a log scale and hidden among 16, 32, 64."""
    folder = tmp_path / "runs" / "spirals" / "sweep-spirals"
    write_sweep(folder)
    (tmp_path / "sweep.toml").write_text(SEARCHED)
    info = json.loads((folder / "sweep.json").read_text())
    (folder / "sweep.json").write_text(json.dumps({**info, "config": str(tmp_path / "sweep.toml")}))
    write_trial(folder, 0, lr=0.0031, hidden=64, valid=[0.61, 0.83, 0.79], end="completed")
    write_trial(folder, 1, lr=0.02, hidden=16, valid=[0.55], end=None)
    write_trial(folder, 2, lr=0.000123, hidden=16, valid=[0.5, 0.52], end="pruned")
    return folder


def plots(app) -> dict[str, ParamPlot]:
    return {p.axis.key: p for p in app.screen.query(ParamPlot)}


async def open_view(app, pilot) -> None:
    await until(
        pilot,
        lambda: (
            app.state.best_trial() == "trial-0000"
            and len(app.state.runs) == 3
            and app.state.best_value("trial-0002") is not None
        ),
    )
    await pilot.press("P")
    await until(
        pilot,
        lambda: (
            isinstance(app.screen, ParamsScreen)
            and all(p.text for p in plots(app).values())
            and app.screen.query_one(ParallelPlot).text
        ),
    )


@sync
async def test_p_shows_the_metric_against_each_parameter_the_best_trial_marked(sweep_dir):
    app = sweep_app(sweep_dir, None)
    async with app.run_test(size=SIZE) as pilot:
        await open_view(app, pilot)
        screen = app.screen
        assert screen.title_text.endswith("3 trials · best ━0 0.8300: lr=0.0031 hidden=64"), screen.title_text
        lr, hidden = plots(app)["optimizer.lr"], plots(app)["model.hidden"]
        # each chart named by its parameter, its axis (log) and the best trial's value of it
        assert lr.border_title == "lr (log) · ★ ━0 0.0031" and hidden.border_title == "hidden · ★ ━0 64"

        # lr: a log axis over the searched range, labelled in decades; one ★ (the best), the pruned trial dim
        lr_rows = lr.text.splitlines()
        assert lr_rows[-1].split() == ["1e-4", "1e-3", "1e-2", "1e-1"], lr_rows[-1]
        assert lr.text.count("★") == 1 and "·" in lr.text and "○" in lr.text  # best, pruned, running
        star_row = next(r for r in lr_rows if "★" in r)
        # the best (0.83) is the highest point, and stands left of the running trial (0.02 > 0.0031)
        assert not any(mark in r for r in lr_rows[: lr_rows.index(star_row)] for mark in "•○·")
        running_row = next(r for r in lr_rows if "○" in r)
        assert star_row.index("★") < running_row.index("○")

        # hidden: its three choices evenly spaced and named, 32 too though no trial took it
        labels = hidden.text.splitlines()[-1]
        assert labels.split() == ["16", "32", "64"], labels
        at = [labels.index(w) + len(w) // 2 for w in ("16", "32", "64")]
        assert abs((at[1] - at[0]) - (at[2] - at[1])) <= 1
        assert hidden.text.count("★") == 1

        # parallel coordinates: an axis per parameter and the metric's, the best trial's crossings marked
        par = screen.query_one(ParallelPlot)
        assert par.border_title == "parallel coordinates · ★ best ━0"
        assert par.text.splitlines()[0].split() == ["lr", "hidden", "accuracy"]
        assert par.text.count("★") == 3  # on each of the three axes
        for word in ("16", "32", "64", "0.83", "0.52"):
            assert word in par.text, word

        # Esc back to the dashboard; P opens it and P closes it
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("P")
        await until(pilot, lambda: isinstance(app.screen, ParamsScreen))
        await pilot.press("P")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("q")


@sync
async def test_a_better_trial_that_ends_while_the_view_is_open_becomes_the_marked_best(sweep_dir):
    app = sweep_app(sweep_dir, None)
    async with app.run_test(size=SIZE) as pilot:
        await open_view(app, pilot)
        write_trial(sweep_dir, 3, lr=0.05, hidden=32, valid=[0.7, 0.91], end="completed")
        await until(pilot, lambda: "best ━3 0.9100: lr=0.05 hidden=32" in app.screen.title_text, timeout=15)
        await until(pilot, lambda: plots(app)["model.hidden"].border_title == "hidden · ★ ━3 32")
        assert "4 trials" in app.screen.title_text
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("q")


@sync
async def test_the_view_fits_80x24(sweep_dir):
    app = sweep_app(sweep_dir, None)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_view(app, pilot)
        for plot in plots(app).values():
            assert "★" in plot.text and max(len(r) for r in plot.text.splitlines()) <= 80
        assert app.screen.query_one(ParallelPlot).text.splitlines()[0].split() == ["lr", "hidden", "accuracy"]
        await pilot.press("escape")
        await pilot.press("q")


@sync
async def test_p_is_a_sweep_s_key_only(tmp_path):
    from tuitrain.dashboard.entry import compare_app

    a = write_trial(tmp_path, 0, lr=0.01, hidden=64, valid=[0.7], end="completed")
    b = write_trial(tmp_path, 1, lr=0.02, hidden=64, valid=[0.6], end="completed")
    app = compare_app([a, b], None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert not app.check_action("parameters", ())
        await pilot.press("P")
        await pilot.pause(0.2)
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("q")


def point(n: int, value: float | None, status: str = "completed", **values) -> TrialPoint:
    return TrialPoint(f"trial-{n:04d}", n, status, value, values)


def test_without_the_config_the_values_decide_each_axis(tmp_path):
    points = [
        point(0, 0.8, lr=1e-4, hidden=16, act="relu"),
        point(1, 0.7, lr=0.05, hidden=64, act="gelu"),
        point(2, None, "running", lr=0.002, hidden=32, act="relu"),
    ]
    axes = param_axes(["lr", "hidden", "act"], points)
    # lr spans 2.7 decades, all above zero: log; hidden only 4x: linear; words: choices, in order
    assert [(a.key, a.kind) for a in axes] == [("lr", "log"), ("hidden", "linear"), ("act", "choice")]
    assert axes[2].choices == ("gelu", "relu") and axes[0].position(1e-3) == pytest.approx(-3)
    # the config's word wins over the values': hidden said to be log, lr said to be linear
    declared = {"lr": {"low": 1e-4, "high": 0.1, "log": False}, "hidden": {"low": 16, "high": 64, "log": True}}
    assert [a.kind for a in param_axes(["lr", "hidden"], points, declared)] == ["linear", "log"]
    assert searched(tmp_path / "gone.toml") == {}
    (tmp_path / "bad.toml").write_text("[sweep\n")
    assert searched(tmp_path / "bad.toml") == {}


def test_parallel_coordinates_put_each_trial_between_its_axes_ends():
    axes = [ParamAxis("lr", "log", low=1e-4, high=1e-1), ParamAxis("hidden", "choice", (16, 32, 64))]
    points = [
        point(0, 0.9, lr=1e-1, hidden=32),
        point(1, 0.5, lr=1e-4, hidden=64),
        point(2, None, "running", lr=1e-2, hidden=16),
        point(3, 0.6, lr=1e-2, hidden=128),
    ]
    columns, lines = parallel(axes, points, "valid/accuracy")
    assert [name for name, _ in columns] == ["lr", "hidden", "accuracy"]
    assert [label for _, label in columns[1][1]] == ["16", "32", "64"]
    # trial 2 has no value yet, trial 3 took a value the axis does not list: neither is drawn
    assert set(lines) == {"trial-0000", "trial-0001"}
    assert lines["trial-0000"] == pytest.approx([1.0, 0.5, 1.0]) and lines["trial-0001"] == pytest.approx([0, 1, 0])


def test_serve_opens_the_sweep_dashboard_for_a_sweep_folder(sweep_dir, monkeypatch):
    """The viewer a browser tab runs (`python -m tuitrain.dashboard.serve DIR`) opens what `watch` would."""
    from tuitrain.dashboard import entry
    from tuitrain.dashboard.serve import open_viewer, viewer_command

    opened = []
    monkeypatch.setattr(entry, "run_sweep_watch", lambda d, theme: opened.append(("sweep", d)) or 0)
    monkeypatch.setattr(entry, "run_watch", lambda d, theme: opened.append(("run", d)) or 0)
    monkeypatch.setattr(entry, "run_compare", lambda ds, theme: opened.append(("compare", ds)) or 0)
    trial = sweep_dir / "trial-0000"
    assert open_viewer([sweep_dir], None) == 0 and open_viewer([trial], None) == 0
    assert open_viewer([trial, sweep_dir / "trial-0001"], None) == 0
    assert [kind for kind, _ in opened] == ["sweep", "run", "compare"] and opened[0][1] == sweep_dir
    assert viewer_command([sweep_dir], None).endswith(f"-- {sweep_dir.resolve()}")
