"""The entry points the CLI calls: `run_live` (train in this process under the dashboard) and
`run_watch` (follow a run directory's events.jsonl, steering it through `FileControl` while it
is live). `tuitrain.dashboard.app` re-exports both; they import `DashboardApp` when called, as
the app module imports this one.

Like the rest of the dashboard, this module must not import the run layer (`tuitrain.config`,
`tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`, `tuitrain.cli`): only
`tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`. `run_live` takes the run as it
comes (anything with subscribe/execute/interrupter/run_dir).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from tuitrain.core.control import FileControl
from tuitrain.dashboard.sources import FileSource, RunSource


def run_live(run: Any, theme: Path | None) -> int:
    """Train `run` (subscribe/execute/interrupter/run_dir) under the dashboard; its exit code."""
    from tuitrain.dashboard.app import DashboardApp

    app = DashboardApp(RunSource(run), run.interrupter, theme)

    def on_term(signum, frame):  # nobody is there to read a summary: stop gracefully, then leave
        app.leave_when_done = True
        run.interrupter.request_stop("signal", signal.Signals(signum).name)

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        app.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if app.exit_code is not None:
        return app.exit_code
    return 130 if run.interrupter.stop_requested else 1


def run_watch(run_dir: Path, theme: Path | None, owned: bool = False) -> int:
    """The dashboard of a run from its files; steers it through FileControl while it is live.
    `owned`: the run is this viewer's parent's (`Monitor`): Ctrl+C stops it (see DashboardApp)."""
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.sinks.run_status import live_status as run_status

    run_dir = Path(run_dir)
    status = run_status(run_dir)
    live = status == "running"
    controller = FileControl(run_dir) if live else None
    notice = {"running": "", "killed": "the run's process is gone: keys that steer are off"}.get(
        status, "finished run: keys that steer are off")
    app = DashboardApp(FileSource(run_dir, live=live), controller, theme, watch=True, owned=owned, notice=notice)
    app.run()
    return 0


__all__ = ["run_live", "run_watch"]
