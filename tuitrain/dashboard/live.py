"""A run trained in this process under the dashboard: `LiveRun`, the one object the app is given
(its source and its controller), and `LiveApp`, the dashboard that fails without taking training
down. `run_live` (tuitrain/dashboard/entry.py) is the only function that starts them.

A resumed run appends to its run directory's events.jsonl: the screen first gets the run's past
sessions from there (the reader `tuitrain watch` uses, `FileSource`, up to where the file ended when
the screen opened), then this session's events, held back meanwhile so that they come after the past.

The run trains on a thread of its own, not the app's worker, so the screen may end first (the
terminal closed under it, a failing widget) while training goes on: `LiveRun` then switches the
console lines on and waits for the run (`go_on_without_the_screen`).

Imports textual (through `DashboardApp`): imported only when a live dashboard opens. Like the rest
of the dashboard, this module must not import the run layer (`tuitrain.config`, `tuitrain.run*`,
`tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`, `tuitrain.cli`): only `tuitrain.core`,
`tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from collections.abc import Iterator

from tuitrain.core.control import raise_in
from tuitrain.core.events import OutputPrinted
from tuitrain.dashboard.app import DashboardApp
from tuitrain.sources.run_files import FileSource, PastSessionsRead
from tuitrain.sinks.console import HeadlessConsole


class _Switch:
    """A stream that drops what it is given until enabled: the console of a run whose screen is up."""

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


class LiveRun:
    """`run` (subscribe/execute/interrupter/run_dir) as the dashboard sees it: the app's source
    (`open`, `work`, `close`) and its controller (`request_stop`, `toggle_pause`,
    `request_checkpoint`), and what became of the screen (`screen_gone`, `hung_up`, `screen_error`).

    Training runs on a thread of its own; the app's worker (`work`) waits for it, or for the app's
    end (`close`): closing the app never abandons training, a stop goes through the interrupter.
    Once the screen is gone, nothing reaches it any more and the app's closing no longer stops
    training. Until then the run's console lines are held back (`out`, `err`)."""

    live = True
    #: events the screen has not folded yet (the app sets it): the reader of past sessions waits on it
    backlog: Any = staticmethod(lambda: 0)

    def __init__(self, run: Any) -> None:
        self.run = run
        self.interrupter = run.interrupter
        self.code: int | None = None  # what training returned
        self.error: BaseException | None = None  # what escaped training (the worker re-raises it)
        self.done = threading.Event()  # training returned
        self._released = threading.Event()  # the worker stops waiting: training returned, or the app left
        self._leaving = threading.Event()  # the app left (close)
        self.thread = threading.Thread(target=self._train, name="tuitrain-train")
        self._emit: Any = None  # the screen's callback (the app's bridge), once opened
        self.screen_gone = False  # the screen ended before training: training goes on without it
        self.hung_up = False  # ... because the terminal closed (SIGHUP)
        self.screen_error: BaseException | None = None  # ... because the screen failed
        self.aborting = False  # a stalled run ends the process ([watch] stall_action = "abort")
        self.interrupts = 0  # Ctrl+C as SIGINT (the screen gone, or `kill -INT`); the app counts its key
        self.ending_now = False  # a second Ctrl+C: training is ended at once (`end_now`)
        self.app: DashboardApp | None = None
        self.out, self.err = _Switch(sys.__stdout__), _Switch(sys.__stderr__)
        self.history: FileSource | None = None  # a resumed run's past sessions, read before this one's events
        #: the screen has every past event (none, or `history` read and folded): this session's events
        #: now go to it as they come; until then they wait in `_held`
        self.caught_up = True
        self._held: list[tuple[Any, Any]] = []
        self._hold = threading.Lock()
        run.subscribe(HeadlessConsole(stream=self.out, err=self.err), False)  # silent while the screen is up

    # --- the app's source ----------------------------------------------------------------------

    def open(self, emit) -> None:
        self._emit = emit
        self.history = self._past_sessions()
        self.caught_up = self.history is None
        self.run.subscribe(self._to_screen, getattr(emit, "step_events", True))

    def _past_sessions(self) -> FileSource | None:
        """The reader of what the run directory's events.jsonl already holds (a resumed run's earlier
        sessions), None when it holds nothing: this session has not begun to write it yet."""
        run_dir = getattr(self.run, "run_dir", None)
        if not run_dir:
            return None
        try:
            size = (Path(run_dir) / "events.jsonl").stat().st_size
        except OSError:
            return None
        return FileSource(Path(run_dir), until=size) if size else None

    def _to_screen(self, event, state=None) -> None:
        if self.screen_gone:  # a screen gone: nothing piles up for it
            return
        if not self.caught_up:
            with self._hold:
                if not self.caught_up:  # the past sessions still come first
                    self._held.append((event, state))
                    return
        self._emit(event, state)

    @property
    def bad_lines(self) -> int:
        """Damaged lines of the past sessions' events.jsonl, left out (the notice counts them)."""
        return self.history.bad_lines if self.history is not None else 0

    def _read_history(self) -> None:
        """The past sessions into the screen, then, once the screen has folded them, this session's
        events held meanwhile (so that a screen told `caught_up` folds only this session's events)."""
        reader = self.history
        reader.backlog = self.backlog
        try:
            reader.open(self._emit)
            try:
                reader.work()
            except Exception as e:  # the past unreadable: this session is still shown
                self._emit(
                    OutputPrinted(text=f"the run's past sessions could not be read: {e}", stream="tuitrain"),
                    None,
                )
            self._emit(PastSessionsRead(), None)
            while self.backlog() and not self._leaving.is_set() and not self.screen_gone:
                self._leaving.wait(0.02)
        finally:
            with self._hold:
                held, self._held = self._held, []
                if not self.screen_gone:
                    for event, state in held:
                        self._emit(event, state)
                self.caught_up = True

    def _train(self) -> None:
        try:
            self.code = self.run.execute()
        except BaseException as e:  # an escaped error still ends the run: the worker re-raises it
            self.error = e
        finally:
            self.done.set()
            self._released.set()

    def work(self) -> int | None:
        self.thread.start()
        if not self.caught_up:
            self._read_history()
        self._released.wait()
        if self.error is not None:
            raise self.error
        return self.code

    def close(self) -> None:
        self._leaving.set()
        if self.history is not None:
            self.history.close()
        self._released.set()  # the app is leaving: its worker stops waiting, training does not stop

    # --- the app's controller ------------------------------------------------------------------

    def request_stop(self, source: str = "api", detail: str = "") -> None:
        if source == "dashboard" and detail == "dashboard closed" and self.screen_gone:
            return  # the screen went on its own: the run goes on without it
        self.interrupter.request_stop(source, detail)

    def toggle_pause(self, source: str = "api") -> None:
        self.interrupter.toggle_pause(source)

    def request_checkpoint(self, source: str = "api") -> None:
        self.interrupter.request_checkpoint(source)

    # --- the screen ending before training -----------------------------------------------------

    def screen_failed(self, error: BaseException) -> None:
        """An error in the app: the screen ends, training goes on."""
        self.screen_gone, self.screen_error = True, error
        self.close()  # the app's worker stops waiting: the app can end while training goes on

    def hang_up(self) -> None:
        """The terminal closed: the screen ends, training goes on detached."""
        self.screen_gone = self.hung_up = True
        _away_from_the_terminal()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    @contextmanager
    def screen_up(self, app: DashboardApp) -> Iterator[None]:
        """While `app` runs: SIGTERM stops the run gracefully and leaves, SIGHUP closes the screen
        (`hang_up`), and a stalled run's abort gives the terminal back first. Afterwards the handlers
        from before are back (SIGHUP stays ignored once the terminal is gone)."""
        screen_closed = threading.Event()

        def on_term(signum, frame):  # nobody is there to read a summary: stop gracefully, then leave
            app.leave_when_done = True
            self.interrupter.request_stop("signal", signal.Signals(signum).name)

        def on_hangup(signum, frame):
            self.hang_up()
            app.exit()

        def on_int(signum, frame):  # a SIGINT not read as a key (`kill -INT`): Ctrl+C's graceful stop
            self.interrupt(app)

        def before_abort() -> None:  # called from the watchdog's thread: the terminal is given back
            self.aborting = True  # first, with the reason on it
            try:
                app.call_from_thread(app.exit, 1)
            except Exception:
                pass
            screen_closed.wait(5.0)

        hooks = getattr(self.interrupter, "before_abort", None)
        if hooks is not None:
            hooks.append(before_abort)
        saved = {}
        if threading.current_thread() is threading.main_thread():
            saved = {
                signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
                signal.SIGHUP: signal.signal(signal.SIGHUP, on_hangup),
                signal.SIGINT: signal.signal(signal.SIGINT, on_int),
            }
        try:
            yield
        finally:
            for signum, handler in saved.items():
                if signum != signal.SIGHUP or not self.screen_gone:
                    signal.signal(signum, handler)
            if self.aborting:
                failed = getattr(app.state, "failed", None)
                why = failed.error if failed is not None else "training stalled"
                sys.__stderr__.write(
                    f"tuitrain: {why}; the run is aborted (exit 1); every thread's stack is in "
                    f"{self.run.run_dir}/experiment.log\n"
                )
                sys.__stderr__.flush()
                screen_closed.set()
                threading.Event().wait()  # the watchdog ends the process
            screen_closed.set()
            if hooks is not None and before_abort in hooks:
                hooks.remove(before_abort)

    # --- Ctrl+C, whether the screen reads it as a key or not --------------------------------------

    def interrupt(self, app: DashboardApp | None = None) -> None:
        """Ctrl+C (SIGINT): the first stops gracefully (a checkpoint is saved), the next ends training now."""
        self.interrupts += 1
        if self.interrupts + (app.interrupts if app is not None else 0) > 1:
            self.end_now(app)
            return
        if app is not None and not self.screen_gone:
            app.leave_when_done = True  # nobody asked for a summary: leave once stopped
        self.interrupter.request_stop("signal", "SIGINT")
        if self.screen_gone and not self.hung_up:
            sys.__stderr__.write("tuitrain: stopping gracefully (a checkpoint is saved); Ctrl+C again ends it now\n")
            sys.__stderr__.flush()

    def end_now(self, app: DashboardApp | None = None) -> None:
        """A second Ctrl+C: training ends at its next Python instruction (the loop takes it as "leave now":
        its checkpoints stay, run.json and events.jsonl say it was interrupted), then the process, with
        exit code 130. The screen, while it is up, leaves first and gives the terminal back."""
        self.ending_now = True
        raise_in(self.thread, KeyboardInterrupt)
        if app is not None and not self.screen_gone:
            app.leave_when_done = True
            app.exit(130)

    #: seconds training has to end after a second Ctrl+C before the process ends without it
    END_NOW_GRACE = 10.0

    def _wait_for_training(self) -> None:
        """Join the training thread; after a second Ctrl+C, for `END_NOW_GRACE` seconds at most (a thread
        stuck in native code never sees the KeyboardInterrupt): then the process ends, exit 130."""
        deadline = None
        while self.thread.is_alive():
            self.thread.join(0.1)
            if self.ending_now:
                deadline = deadline or time.monotonic() + self.END_NOW_GRACE
                if time.monotonic() > deadline and self.thread.is_alive():
                    sys.__stderr__.write(
                        "tuitrain: training did not end within "
                        f"{self.END_NOW_GRACE:.0f} s of the second Ctrl+C; ending the process\n"
                    )
                    sys.__stderr__.flush()
                    os._exit(130)

    # --- after the screen ----------------------------------------------------------------------

    def finish(self, app: DashboardApp, crash: BaseException | None) -> int:
        """The screen has ended (`crash`: how its own end failed): wait for training, going on
        without the screen if it ended first; the run's exit code."""
        failed = crash is not None or app.return_code not in (None, 0)
        if self.thread.ident is None and failed:  # the screen failed before training began
            self.screen_gone = True
            self.thread.start()
        if self.thread.is_alive():
            if self.screen_gone or failed:
                self.go_on_without_the_screen(app, crash)
            else:  # the screen was closed on purpose: the stop it asked for is under way
                self._wait_for_training()
        elif (crash or self.screen_error) is not None and not self.hung_up:
            self._failed_after_the_run(app, crash or self.screen_error)
        if self.code is not None:
            return self.code
        if self.ending_now:
            return 130
        if app.exit_code is not None:
            return app.exit_code
        return 130 if self.interrupter.stop_requested else 1

    def _failed_after_the_run(self, app: DashboardApp, error: BaseException) -> None:
        """The screen failed once training had ended (on its summary, say): the run's files are whole; one
        line says what failed and where its traceback is, then the summary the screen could not show."""
        from tuitrain.dashboard.failure import head, traceback_file
        from tuitrain.dashboard.screens.result_screen import result_body, result_title

        where = traceback_file(error)
        lines = [f"tuitrain: the dashboard failed ({head(error)}) after the run ended{where}"]
        if app.state.ended:
            lines += [result_title(app.state), result_body(app.state, self.code)]
        sys.__stderr__.write("\n".join(lines) + "\n")
        sys.__stderr__.flush()

    def go_on_without_the_screen(self, app: DashboardApp, crash: BaseException | None) -> None:
        """The screen ended before training did: say why (experiment.log), then wait for the run."""
        from tuitrain.core.output import capture_output

        self.screen_gone = True  # nothing more for the screen
        run = self.run
        bus = getattr(run, "bus", None)
        while bus is None and self.thread.is_alive() and not self.done.wait(0.05):
            bus = getattr(run, "bus", None)  # a run the failing screen never let begin: its bus comes soon
        if self.hung_up:
            why = "the terminal closed: training goes on detached; tuitrain watch RUN_DIR shows it again"
        else:
            error = crash or self.screen_error
            detail = "".join(traceback.format_exception(error)) if error is not None else ""
            head = f"{type(error).__name__}: {error}" if error is not None else f"exit code {app.return_code}"
            why = f"the dashboard failed ({head}); training goes on without it"
            if detail:
                why += "\n" + detail.rstrip()
        if bus is not None:
            bus.emit(OutputPrinted(text=why, stream="tuitrain"))
            bus.deliver()  # into experiment.log before the console comes on
        if not self.hung_up:
            self.out.enabled = self.err.enabled = True  # the terminal is still there: console lines from now on
            sys.__stderr__.write(
                f"tuitrain: the dashboard failed ({head}); training goes on without it; "
                f"the traceback is in {run.run_dir}/experiment.log\n"
            )
        with self._signals_without_the_screen(), capture_output(bus.emit) if bus is not None else nullcontext():
            self._wait_for_training()  # (what the user's code prints still reaches experiment.log)

    @contextmanager
    def _signals_without_the_screen(self) -> Iterator[None]:
        """Ctrl+C and a closed terminal as they were under the screen: the first Ctrl+C stops gracefully,
        a second ends training now (no KeyboardInterrupt in this thread, which would leave training running
        while the interpreter ends: C++'s `terminate`, exit 134, run.json `running`); SIGHUP goes on
        detached. SIGTERM keeps the graceful stop it had before the screen."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_hangup(signum, frame):
            self.hang_up()

        saved = {
            signal.SIGINT: signal.signal(signal.SIGINT, lambda signum, frame: self.interrupt(self.app)),
            signal.SIGHUP: signal.signal(signal.SIGHUP, on_hangup),
        }
        try:
            yield
        finally:
            for signum, handler in saved.items():
                if signum != signal.SIGHUP or not self.hung_up:
                    signal.signal(signum, handler)


class LiveApp(DashboardApp):
    """The dashboard of a run trained here (`LiveRun`): an error in it ends the screen, never the run.
    `options`: `DashboardApp`'s keywords (a test's clock)."""

    def __init__(self, live: LiveRun, theme: Path | None, **options: Any) -> None:
        options.setdefault("hard_exit", live.end_now)  # a second Ctrl+C ends training, then the process
        super().__init__(live, live, theme, **options)
        self.live = live
        live.app = self

    # Textual's one funnel for an unhandled exception, private: it has no public hook for one (textual
    # 0.80 to 8.2). The error is kept for experiment.log; the app ends at once (`panic`) with nothing to
    # print, so no traceback lands over the console lines that follow; the exit code is 1.
    def _handle_exception(self, error: Exception) -> None:
        self.live.screen_failed(error)
        super()._handle_exception(error)


__all__ = ["LiveApp", "LiveRun"]
