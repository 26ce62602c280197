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

import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from tuitrain.core.control import FileControl
from tuitrain.dashboard.sources import FileSource


class _Steering:
    """The interrupter as the dashboard steers it. Once the screen is gone (the terminal closed under
    it, or it failed), the app's closing no longer stops training: the run goes on without it."""

    def __init__(self, interrupter: Any) -> None:
        self.interrupter = interrupter
        self.app: Any = None
        self.screen_gone = False
        self.hung_up = False
        self.error: BaseException | None = None  # what made the screen fail

    def request_stop(self, source: str = "api", detail: str = "") -> None:
        if source == "dashboard" and detail == "dashboard closed" and self.screen_gone:
            return
        self.interrupter.request_stop(source, detail)

    def screen_failed(self, error: BaseException, training: "_Training") -> None:
        self.screen_gone, self.error = True, error
        training.close()  # the app's worker stops waiting: the app can end while training goes on

    def toggle_pause(self, source: str = "api") -> None:
        self.interrupter.toggle_pause(source)

    def request_checkpoint(self, source: str = "api") -> None:
        self.interrupter.request_checkpoint(source)


class _Training:
    """The run on a thread of its own, not the app's worker: the app may end (a closed terminal, a
    failing screen) while training goes on. The app's worker waits for it, or for the app's end."""

    live = True

    def __init__(self, run: Any) -> None:
        self.run = run
        self.code: int | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._released = threading.Event()
        self.thread = threading.Thread(target=self._train, name="tuitrain-train")

    def _train(self) -> None:
        try:
            self.code = self.run.execute()
        except BaseException as e:  # an escaped error still ends the run: the worker re-raises it
            self.error = e
        finally:
            self.done.set()
            self._released.set()

    def open(self, emit) -> None:
        self.screen = _Attached(emit)
        self.run.subscribe(self.screen)

    def work(self) -> int | None:
        self.thread.start()
        self._released.wait()
        if self.error is not None:
            raise self.error
        return self.code

    def close(self) -> None:
        self._released.set()  # the app is leaving: its worker stops waiting, training does not stop


class _Attached:
    """The screen's callback on the run's bus, until the screen is gone (then nothing piles up for it)."""

    def __init__(self, callback) -> None:
        self.callback, self.on = callback, True
        self.step_events = getattr(callback, "step_events", True)

    def __call__(self, event, state=None) -> None:
        if self.on:
            self.callback(event, state)


class _Switch:
    """A stream that drops what it is given until `on()`: the console of a run whose screen is up."""

    def __init__(self, stream) -> None:
        self.stream, self.enabled = stream, False

    def write(self, text: str) -> int:
        return self.stream.write(text) if self.enabled and self.stream is not None else len(text)

    def flush(self) -> None:
        if self.enabled and self.stream is not None:
            self.stream.flush()


def _away_from_the_terminal() -> None:
    """The terminal is gone: stdin, stdout and stderr read and write /dev/null from now on."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)


def run_live(run: Any, theme: Path | None) -> int:
    """Train `run` (subscribe/execute/interrupter/run_dir) under the dashboard; its exit code.

    SIGHUP (the terminal closed, an SSH connection dropped) closes the screen and the run goes on
    detached, writing its run directory as a headless run does (`tuitrain watch RUN_DIR` shows it
    again); a screen that fails leaves training to go on with console lines. Either way the
    process ends with the run, with its exit code."""
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.sinks.console import HeadlessConsole

    class LiveApp(DashboardApp):
        """The dashboard of a run trained here: an error in it ends the screen, never the run."""

        # Textual's hooks for an unhandled exception (textual < 9, pinned in pyproject): the error is
        # kept for experiment.log, and its traceback is not printed over the console lines that follow
        def _handle_exception(self, error: Exception) -> None:
            steering.screen_failed(error, training)
            super()._handle_exception(error)

        def _fatal_error(self) -> None:
            self._close_messages_no_wait()

    training = _Training(run)
    steering = _Steering(run.interrupter)
    app = LiveApp(training, steering, theme)
    steering.app = app
    out, err = _Switch(sys.__stdout__), _Switch(sys.__stderr__)
    run.subscribe(HeadlessConsole(stream=out, err=err), False)  # silent while the screen is up

    def on_term(signum, frame):  # nobody is there to read a summary: stop gracefully, then leave
        app.leave_when_done = True
        run.interrupter.request_stop("signal", signal.Signals(signum).name)

    def on_hangup(signum, frame):
        steering.screen_gone = steering.hung_up = True
        _away_from_the_terminal()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        app.exit()

    screen_closed = threading.Event()

    def before_abort() -> None:  # a stalled run ends the process ([watch] stall_action = "abort"):
        steering.aborting = True  # the terminal is given back first, with the reason on it
        try:
            app.call_from_thread(app.exit, 1)
        except Exception:
            pass
        screen_closed.wait(5.0)

    hooks = getattr(run.interrupter, "before_abort", None)
    if hooks is not None:
        hooks.append(before_abort)
    saved = {}
    if threading.current_thread() is threading.main_thread():
        saved = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
                 signal.SIGHUP: signal.signal(signal.SIGHUP, on_hangup)}
    crash = None
    try:
        app.run()
    except Exception as e:  # the screen's own end failed: training is not the screen's to take down
        crash = e
    finally:
        for signum, handler in saved.items():
            if signum != signal.SIGHUP or not steering.screen_gone:
                signal.signal(signum, handler)
        if getattr(steering, "aborting", False):
            failed = getattr(app.state, "failed", None)
            why = failed.error if failed is not None else "training stalled"
            sys.__stderr__.write(f"tuitrain: {why}; the run is aborted (exit 1); every thread's stack is in "
                                 f"{run.run_dir}/experiment.log\n")
            sys.__stderr__.flush()
            screen_closed.set()
            threading.Event().wait()  # the watchdog ends the process
        screen_closed.set()
        if hooks is not None and before_abort in hooks:
            hooks.remove(before_abort)
    failed = crash is not None or app.return_code not in (None, 0)
    if training.thread.ident is None and failed:  # the screen failed before training began
        steering.screen_gone = True
        training.thread.start()
    if training.thread.is_alive():
        if steering.screen_gone or failed:
            _go_on_without_the_screen(run, training, steering, app, crash, out, err)
        else:  # the screen was closed on purpose: the stop it asked for is under way
            training.thread.join()
    if training.code is not None:
        return training.code
    if app.exit_code is not None:
        return app.exit_code
    return 130 if run.interrupter.stop_requested else 1


def _go_on_without_the_screen(run, training, steering, app, crash, out, err) -> None:
    """The screen ended before training did: say why (experiment.log), then wait for the run."""
    from tuitrain.core.events import OutputPrinted
    from tuitrain.core.output import capture_output

    screen = getattr(training, "screen", None)
    if screen is not None:
        screen.on = False
    bus = getattr(run, "bus", None)
    while bus is None and training.thread.is_alive() and not training.done.wait(0.05):
        bus = getattr(run, "bus", None)  # a run the failing screen never let begin: its bus comes soon
    if steering.hung_up:
        why = "the terminal closed: training goes on detached; tuitrain watch RUN_DIR shows it again"
    else:
        error = crash or steering.error
        detail = "".join(traceback.format_exception(error)) if error is not None else ""
        head = f"{type(error).__name__}: {error}" if error is not None else f"exit code {app.return_code}"
        why = f"the dashboard failed ({head}); training goes on without it"
        if detail:
            why += "\n" + detail.rstrip()
    if bus is not None:
        bus.emit(OutputPrinted(text=why, stream="tuitrain"))
        bus.deliver()  # into experiment.log before the console comes on
    if not steering.hung_up:
        out.enabled = err.enabled = True  # the terminal is still there: console lines from now on
        sys.__stderr__.write(f"tuitrain: the dashboard failed ({head}); training goes on without it; "
                             f"the traceback is in {run.run_dir}/experiment.log\n")
    if bus is not None:
        with capture_output(bus.emit):  # what the user's code prints still reaches experiment.log
            training.thread.join()
    else:
        training.thread.join()


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


def compare_app(runs: list[Path], theme: Path | None):
    """The dashboard of several runs: every chart overlays the runs shown, the run list names them
    all (R: show/hide, pin, filter), `d` lists their config differences; nothing is steered."""
    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.dashboard.compare import CompareSource, CompareState, read_config, run_names
    from tuitrain.sinks.run_status import live_status as run_status

    runs = [Path(r) for r in runs]
    names = run_names(runs)
    live = [run_status(r) == "running" for r in runs]
    source = CompareSource(runs, names, live)
    app = DashboardApp(source, None, theme, watch=True,
                       notice=f"comparing {len(runs)} runs: R run list · d config differences · keys that steer are off")
    app.state = CompareState(names, {n: read_config(r) for n, r in zip(names, runs)}, clock=app.clock)
    return app


def run_compare(runs: list[Path], theme: Path | None) -> int:
    """Several runs' dashboards in one (see `compare_app`); each run keeps its own `tuitrain stop`."""
    compare_app(runs, theme).run()
    return 0


__all__ = ["compare_app", "run_compare", "run_live", "run_watch"]
