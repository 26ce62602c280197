"""The registry of readers (tuitrain/sources/registry.py) on real files: two tuitrain runs trained by the runner
(one with its TensorBoard sink on: those files are the run's, no run of their own), a TensorBoard run written by
torch's SummaryWriter and a Lightning CSVLogger run, in one folder; found, named, opened, compared in one
dashboard, listed by `tuitrain ls`; a reader module that is not there skipped, and one whose extra is missing
named in one line (a small reader module registered for the test)."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import pytest

from tests.dashboard.test_app import SIZE, sync, until
from tuitrain.core.events import MetricsLogged, RunStarted
from tuitrain.sources import registry
from tuitrain.sources.refs import RunRef
from tuitrain.sources.run_files import FileSource, MetricsBlock, ReplaySource

STEPS = 120


@pytest.fixture(scope="module")
def mixed(make_tiny) -> tuple:
    """FOLDER/tiny/<two runs>, FOLDER/tb/torch_run (SummaryWriter), FOLDER/lit/version_0 (CSVLogger)."""
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.tensorboard import SummaryWriter

    from tuitrain.run.runner import prepare_run

    tiny = make_tiny("registry")
    runs = []
    try:
        for lr, tb in (("0.05", "true"), ("0.001", "false")):
            extra = [f"optimizer.lr={lr}", "train.epochs=1", f"log.tensorboard={tb}"]
            run = prepare_run(tiny.config, extra, headless=True)
            assert run.execute() == 0
            runs.append(run.run_dir)
    finally:
        sys.modules.pop("tinyproj", None)
    w = SummaryWriter(str(tiny.runs / "tb" / "torch_run"))
    for i in range(1, STEPS + 1):
        w.add_scalar("loss", 1.0 / i, i)
        if i % 40 == 0:
            w.add_scalar("val_loss", 2.0 / i, i)
    w.close()
    logger = CSVLogger(str(tiny.runs / "lit"), name="")
    for i in range(1, STEPS + 1):
        logger.log_metrics({"train_loss": 3.0 / i}, step=i)
    logger.save()
    logger.finalize("success")
    return tiny, runs


def test_a_folder_of_several_tools_holds_each_run_once(mixed):
    tiny, runs = mixed
    assert any((runs[0]).rglob("events.out.tfevents.*")), "the sink was on: its files are in the run"
    found = registry.find([tiny.runs])
    tools = sorted((r.tool, Path(r.path).resolve()) for r in found.runs)
    assert tools == sorted(
        [("tuitrain", runs[0].resolve()), ("tuitrain", runs[1].resolve())]
        + [("tensorboard", (tiny.runs / "tb" / "torch_run").resolve())]
        + [("lightning", (tiny.runs / "lit" / "version_0").resolve())]
    )  # the sink's TensorBoard files are the tuitrain run's, not a run of their own
    assert found.empty == [] and found.unreadable == []
    names = registry.names(found.runs)
    assert len(set(names)) == 4 and {"tb/torch_run", "lit/version_0"} <= set(names), names
    # named twice (the folder and one of its runs): listed once
    again = registry.find([tiny.runs, runs[0]])
    assert len(again.runs) == 4
    # a path of no run: said so, nothing found
    nothing = registry.find([tiny.root / "tinyproj.py"])
    assert nothing.runs == [] and nothing.empty == [str(tiny.root / "tinyproj.py")]


def test_each_run_opens_as_its_readers_source_and_says_its_events(mixed):
    tiny, runs = mixed
    by_tool = {}
    for ref in registry.find([tiny.runs]).runs:
        by_tool.setdefault(ref.tool, ref)
    own = registry.open_source(by_tool["tuitrain"])
    assert isinstance(own, FileSource) and not own.live and not registry.is_live(by_tool["tuitrain"])
    for tool in ("tensorboard", "lightning"):
        source = registry.open_source(by_tool[tool], live=False)
        assert source.run_dir is None and source.problems == []  # exports never go into the tool's folder
        got: list = []
        source.open(lambda e, s=None, got=got: got.append(e))
        worker = threading.Thread(target=source.work, daemon=True)
        worker.start()
        for _ in range(200):
            if getattr(source, "caught_up", False):
                break
            time.sleep(0.05)
        source.close()
        worker.join(5)
        assert isinstance(got[0], RunStarted), (tool, got[:2])
        steps = [
            step
            for e in got
            if isinstance(e, MetricsBlock)
            for (split, _, _), (xs, _) in e.series.items()
            if split == "train"
            for step in xs.tolist()
        ]
        assert max(steps) == STEPS, tool


def test_a_reader_not_there_is_skipped_and_a_missing_extra_is_one_line(tmp_path, monkeypatch):
    """A fake tool: its files end in .fake; its reader needs a package that is not installed."""
    fake = types.ModuleType("tuitrain_test_fake_reader")
    fake.TOOL, fake.EXTRA = "fake", "fake"
    fake.find_runs = lambda path: [RunRef("fake", p, p.stem) for p in sorted(Path(path).glob("*.fake"))]
    fake.is_live = lambda ref: False

    def open_source(ref, live=None):
        raise ImportError("No module named 'fakeproto'")

    fake.open_source = open_source
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    readers = (
        *registry.READERS,
        registry.Reader("tuitrain.sources.not_written_yet", "Nothing", "nothing", "nothing"),
        registry.Reader(fake.__name__, "Fake", "fake", "tuitrain_no_such_package"),
    )
    monkeypatch.setattr(registry, "READERS", readers)
    (tmp_path / "a.fake").write_text("")
    found = registry.find([tmp_path])
    assert [r.name for r in found.runs] == ["a"]
    assert found.missing == ["Fake runs need an extra: pip install 'tuitrain[fake]'"]
    with pytest.raises(ImportError, match=r"pip install 'tuitrain\[fake\]'"):
        registry.open_source(found.runs[0])
    # a reader that fails on odd files: one line, the other readers' runs still found
    fake.find_runs = lambda path: 1 / 0
    broken = registry.find([tmp_path])
    said = f"{tmp_path}: the Fake reader failed (ZeroDivisionError: division by zero)"
    assert broken.runs == [] and broken.unreadable == [said]


def test_names_are_all_different_and_tuitrain_runs_keep_theirs(tmp_path):
    a, b = tmp_path / "x" / "20240101", tmp_path / "y" / "20240101"
    refs = [registry.own(a), registry.own(b)]
    refs += [RunRef("tensorboard", tmp_path / "t", "base"), RunRef("lightning", tmp_path / "l", "base")]
    assert registry.names(refs) == ["x/20240101", "y/20240101", "base (tensorboard)", "base (lightning)"]
    same = [RunRef("mlflow", tmp_path / "db", "exp/run", key=k) for k in ("1", "2")]
    assert len(set(registry.names(same))) == 2


@sync
async def test_runs_of_three_tools_compared_in_one_view(mixed):
    """`tuitrain watch FOLDER`'s view of a folder holding runs of tuitrain, TensorBoard and Lightning: every
    run in the run list, each series named by its run in the charts, the control keys off."""
    from tuitrain.dashboard.entry import compare_app
    from tuitrain.dashboard.charts.chart_grid import ChartGrid
    from tuitrain.dashboard.panels.control_bar import ControlBar
    from tuitrain.dashboard.panels.run_list import RunList

    tiny, runs = mixed
    refs = registry.find([tiny.runs]).runs
    names = registry.names(refs)
    app = compare_app(refs, None)
    async with app.run_test(size=SIZE) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: "loss" in grid.charts and len(grid.charts["loss"].points) >= 7)  # 2+2, 2, 1
        keys = set(grid.charts["loss"].points)
        own = [n for n, r in zip(names, refs) if r.tool == "tuitrain"]
        tb = next(n for n, r in zip(names, refs) if r.tool == "tensorboard")
        lit = next(n for n, r in zip(names, refs) if r.tool == "lightning")
        assert {f"train/{own[0]}", f"train/{own[1]}", f"train/{tb}", f"valid/{tb}", f"train/{lit}"} <= keys, keys
        xs, ys = grid.charts["loss"].points[f"train/{tb}"]
        assert xs[-1] == STEPS and ys[-1] == pytest.approx(1.0 / STEPS)
        assert sorted(r.name for r in app.query_one(RunList).runs) == sorted(names)
        assert not app.query_one(ControlBar).display  # nothing is steered
        await pilot.press("q")


@sync
async def test_a_reader_s_problems_reach_the_notice_line(tmp_path):
    """What a reader skipped as damaged (its source's `problems`) is the notice's first words."""
    from tuitrain.dashboard.files_app import FilesApp
    from tuitrain.dashboard.screens.screen import DashboardScreen

    started = RunStarted(run_dir="", experiment="x", epochs=1, max_steps=0, steps_per_epoch=0, batch_size=1)
    source = ReplaySource([started], live=False)
    source.problems = []
    app = FilesApp(source, None, watch=True, notice="read only: keys that steer are off")
    async with app.run_test(size=SIZE) as pilot:
        source.push(MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.0}))
        source.problems.append("events.out.tfevents.1.host: a torn last record at byte 10,240 skipped")
        source.problems.append("events.out.tfevents.2.host: 3 records with a bad CRC skipped")
        notice = lambda: str(app.screen.query_one("#notice").render())  # noqa: E731
        await until(pilot, lambda: "torn last record" in notice(), timeout=10)
        assert "(and 1 more thing skipped)" in notice()
        # the rest of the notice is said where the bar has room; here its last part gives way, whole
        said = app.screen.query_one("#notice").said[0]
        assert said.endswith(" · read only: keys that steer are off") and "keys that" not in notice()
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("q")


def test_ls_lists_every_tool_s_runs_and_watch_says_a_bad_path_in_one_line(mixed):
    tiny, runs = mixed
    listed = tiny.cli("ls", tiny.runs)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 4, lines
    # (just written: a reader may still call it running, as a file written in the last minutes is)
    assert any(line.startswith("tb/torch_run (TensorBoard)") for line in lines), lines
    assert any(line.startswith("lit/version_0 (Lightning CSVLogger)") for line in lines), lines
    assert sum(line.startswith("tiny/") and "completed" in line for line in lines) == 2, lines
    (tiny.root / "empty").mkdir(exist_ok=True)
    for path, said in ((tiny.root / "gone", "no such file or folder"), (tiny.root / "empty", "no runs under it")):
        r = tiny.cli("watch", path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
        assert r.stderr.startswith(f"tuitrain: error: {path}: ")
    from tuitrain.cli import _watched  # a run's own file names that run (it was "not a run directory")

    run = next(p for p in (tiny.runs / "tiny").iterdir() if (p / "events.jsonl").is_file())
    for name in ("events.jsonl", "run.json"):
        got = _watched([str(run / name)])
        assert not isinstance(got, int) and [Path(r.path).resolve() for r in got[0]] == [run.resolve()], got


@sync
async def test_another_tool_s_run_alone_is_read_only_and_exports_into_the_current_folder(mixed, tmp_path, monkeypatch):
    from tuitrain.dashboard.charts.chart_grid import ChartGrid
    from tuitrain.dashboard.entry import watch_app
    from tuitrain.dashboard.panels.control_bar import ControlBar

    tiny, _ = mixed
    folder = tiny.runs / "tb" / "torch_run"
    before = sorted(p.name for p in folder.iterdir())
    monkeypatch.chdir(tmp_path)
    (ref,) = registry.find([folder]).runs
    app = watch_app(ref, None)
    async with app.run_test(size=SIZE) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: "loss" in grid.charts and "valid" in grid.charts["loss"].points)
        assert app.controller is None and not app.query_one(ControlBar).display
        assert "TensorBoard run, read only" in str(app.screen.query_one("#notice").render())
        await pilot.press("e")
        await until(pilot, lambda: app.last_export is not None)
        assert app.last_export.parent == tmp_path / "exports" and (app.last_export / "train-step-loss.csv").exists()
        await pilot.press("q")
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written into TensorBoard's folder


@sync
async def test_a_log_without_times_shows_no_clock_or_speed(mixed):
    """Lightning's CSV records no times: the progress panel said "Speed warming up" and a ticking Time while
    read, then "Time 0:00:00 ETA 0:00:00"; it says they are not in this log."""
    from tests.dashboard.test_app import shown
    from tuitrain.dashboard.entry import watch_app
    from tuitrain.dashboard.panels.progress_panel import ProgressPanel

    tiny, _ = mixed
    (ref,) = registry.find([tiny.runs / "lit" / "version_0"]).runs
    app = watch_app(ref, None)
    async with app.run_test(size=SIZE) as pilot:
        panel = app.query_one(ProgressPanel)
        await until(pilot, lambda: app.state.step == STEPS and "Step  120" in shown(panel), timeout=20)
        await pilot.pause()
        text = shown(panel)
        assert "Speed not in this log" in text and "Time  not in this log" in text, text
        await pilot.press("q")


def test_the_notebook_s_picture_of_a_tensorboard_folder(mixed, tmp_path):
    """`tuitrain watch PATH --frames FILE` (what a notebook's NotebookView runs) draws another tool's run too,
    and leaves once the run has ended (its writer stopped: the file untouched for minutes)."""
    import os
    import shutil

    tiny, _ = mixed
    folder = shutil.copytree(tiny.runs / "tb" / "torch_run", tmp_path / "baseline")
    for f in folder.iterdir():
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    out = tmp_path / "picture.svg"
    r = tiny.cli("watch", folder, "--frames", out, "--size", "100x30", timeout=300)
    assert r.returncode == 0, r.stderr
    svg = out.read_text()
    assert "baseline" in svg and "loss" in svg and ("completed" in svg or "ended" in svg)  # (the log's end)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        p.name for p in (tiny.runs / "tb" / "torch_run").iterdir()
    )


def test_serve_s_viewer_opens_what_watch_would(mixed, monkeypatch):
    """Each browser tab's viewer (`python -m tuitrain.dashboard.serve PATH...`) finds the runs as `watch` does."""
    from tuitrain.dashboard import entry
    from tuitrain.dashboard.serve import open_viewer

    tiny, runs = mixed
    opened = []
    monkeypatch.setattr(entry, "run_watch", lambda d, theme, note="": opened.append(("run", d)) or 0)
    monkeypatch.setattr(entry, "run_compare", lambda ds, theme, note="": opened.append(("compare", ds)) or 0)
    assert open_viewer([tiny.runs / "tb" / "torch_run"], None) == 0
    assert open_viewer([runs[0]], None) == 0
    assert open_viewer([tiny.runs], None) == 0
    (kind, ref), (kind2, path), (kind3, refs) = opened
    assert (kind, ref.tool, kind2, path, kind3) == ("run", "tensorboard", "run", runs[0], "compare")
    assert sorted(r.tool for r in refs) == ["lightning", "tensorboard", "tuitrain", "tuitrain"]
