"""The entry points the CLI calls: `run_live` (train in this process under the dashboard) and
`run_watch` (follow a run directory's events.jsonl, steering it through `FileControl` while it
is live; another tool's run, read only), `run_compare` (runs of any tools, found by
`tuitrain.sources.registry`), and `run_sweep_watch` (a sweep's folder, its new trials taken in). Each
imports the app when called: textual loads only once a dashboard opens. `run_live` is the only way
into a live run's dashboard (`LiveRun` and `LiveApp`, tuitrain/dashboard/live.py).

Like the rest of the dashboard, this module must not import the run layer (`tuitrain.config`,
`tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`, `tuitrain.cli`): only
`tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`. `run_live` takes the run as it
comes (anything with subscribe/execute/interrupter/run_dir).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tuitrain.core.control import FileControl
from tuitrain.dashboard.failure import head, traceback_file
from tuitrain.sources import registry
from tuitrain.sources.refs import RunRef
from tuitrain.sources.run_files import FileSource


def run_live(run: Any, theme: Path | None) -> int:
    """Train `run` (subscribe/execute/interrupter/run_dir) under the dashboard; its exit code.

    The one way in, in four steps (tuitrain/dashboard/live.py):
      1. `LiveRun(run)`: the run as the app's source and controller (its console lines held back);
      2. `LiveApp`: the dashboard of it, whose errors end the screen, never the run;
      3. the app runs while SIGTERM, SIGHUP and a stalled run's abort act on it (`screen_up`);
      4. `finish`: the run goes on without the screen if the screen ended first; its exit code.

    SIGHUP (the terminal closed, an SSH connection dropped) closes the screen and the run goes on
    detached, writing its run directory as a headless run does (`tuitrain watch RUN_DIR` shows it
    again); a screen that fails leaves training to go on with console lines. Either way the
    process ends with the run, with its exit code."""
    from tuitrain.dashboard.panels import graphics
    from tuitrain.dashboard.live import LiveApp, LiveRun

    graphics.probe()  # the terminal asked what images it draws while no app reads its answers
    live = LiveRun(run)
    app = LiveApp(live, theme)
    crash = None
    with live.screen_up(app):
        try:
            app.run()
        except Exception as e:  # the screen's own end failed: training is not the screen's to take down
            crash = e
    return live.finish(app, crash)


def run_watch(run_dir: Path | RunRef, theme: Path | None, owned: bool = False, note: str = "") -> int:
    """The dashboard of a run from its files; steers it through FileControl while it is live.
    `owned`: the run is this viewer's parent's (`Monitor`): Ctrl+C stops it (see DashboardApp).
    Another tool's run (a RunRef of its reader) is read only (`watch_app`); `note`: a line for the notice."""
    from tuitrain.dashboard.panels import graphics
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.sinks.run_status import live_status as run_status

    if isinstance(run_dir, RunRef):
        if not registry.is_own(run_dir):
            graphics.probe()
            return viewed(watch_app(run_dir, theme, note))
        run_dir = run_dir.path
    run_dir = Path(run_dir)
    graphics.probe()  # before the app reads the keys (never in a browser: serve's web driver)
    status = run_status(run_dir)
    live = status == "running"
    controller = FileControl(run_dir) if live else None
    notice = {"running": "", "killed": "the run's process is gone: keys that steer are off"}.get(
        status, "finished run: keys that steer are off"
    )
    app = DashboardApp(FileSource(run_dir, live=live), controller, theme, watch=True, owned=owned, notice=notice)
    return viewed(app)


def watch_app(ref: RunRef, theme: Path | None, note: str = ""):
    """The dashboard of another tool's run (a TensorBoard folder, a Lightning version_N ...): its series,
    samples and histograms as its reader hands them on; nothing is steered (tuitrain did not start it)."""
    from tuitrain.dashboard.files_app import FilesApp

    source = registry.open_source(ref)
    notice = f"{registry.label(ref.tool)} run, read only: keys that steer are off"
    return FilesApp(source, None, theme, watch=True, notice=_joined(note, notice))


def _joined(*parts: str) -> str:
    return " · ".join(p for p in parts if p)


def viewed(app) -> int:
    """Run a viewer's app (watch, compare, a sweep); 0, or 1 when the screen failed: one line on stderr
    naming the error and the file that holds its traceback, never a traceback over the terminal. The run
    watched is not the viewer's: it goes on."""
    app.run()
    error = app.failure
    if error is None:
        return 0
    sys.stderr.write(f"tuitrain: the dashboard failed ({head(error)}){traceback_file(error)}\n")
    sys.stderr.flush()
    return 1


def compare_app(runs: list[Path] | list[RunRef], theme: Path | None, note: str = ""):
    """The dashboard of several runs (tuitrain's run folders, or runs of any tool the registry found):
    every chart overlays the runs shown, each series named by its run, the run list names them all (R:
    show/hide, pin, filter), `d` lists their config differences; nothing is steered."""
    from tuitrain.dashboard.files_app import FilesApp
    from tuitrain.dashboard.state.compare import CompareSource, CompareState, read_config

    refs = [r if isinstance(r, RunRef) else registry.own(r) for r in runs]
    names = registry.names(refs)
    live = [registry.is_live(r) for r in refs]
    source = CompareSource(refs, names, live)
    app = FilesApp(
        source,
        None,
        theme,
        watch=True,
        notice=_joined(
            note, f"comparing {len(refs)} runs: R run list · d config differences · keys that steer are off"
        ),
    )
    # a tuitrain run's config.toml; another tool's config comes with its RunStarted
    configs = {n: read_config(r.path) if registry.is_own(r) else {} for n, r in zip(names, refs)}
    app.state = CompareState(names, configs, clock=app.clock)
    return app


def run_compare(runs: list[Path] | list[RunRef], theme: Path | None, note: str = "") -> int:
    """Several runs' dashboards in one (see `compare_app`); each run keeps its own `tuitrain stop`."""
    return viewed(compare_app(runs, theme, note))


def sweep_app(sweep_dir: Path, theme: Path | None):
    """The dashboard of a sweep's folder (`tuitrain sweep`'s SWEEP_DIR): its trials compared as
    `compare_app` compares runs, each listed with its searched values, status and best value of the
    sweep's metric; a trial that starts later joins the list and the charts within a second or two."""
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.dashboard.state.sweep import SweepSource, SweepState
    from tuitrain.sources.sweep_files import read_sweep

    sweep_dir = Path(sweep_dir)
    sweep = read_sweep(sweep_dir)
    source = SweepSource(sweep_dir)
    app = DashboardApp(
        source,
        None,
        theme,
        watch=True,
        notice=f"sweep {sweep.name}: trials join as they start · R trial list · d config "
        "differences · keys that steer are off",
    )
    app.state = SweepState(sweep, source.trials, source.configs, clock=app.clock)
    return app


def run_sweep_watch(sweep_dir: Path, theme: Path | None) -> int:
    """`tuitrain watch SWEEP_DIR`: the sweep's trials, those to come included (see `sweep_app`)."""
    return viewed(sweep_app(sweep_dir, theme))


__all__ = [
    "compare_app",
    "run_compare",
    "run_live",
    "run_sweep_watch",
    "run_watch",
    "sweep_app",
    "viewed",
    "watch_app",
]
