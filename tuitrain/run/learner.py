"""`tuitrain.Learner`: the core Learner as a script uses it, with a run directory, a screen and controls.

The core's Learner (tuitrain/core/learner.py) writes and shows nothing by itself: whoever builds it
passes the sinks in. This one, for scripts:
- given `run_dir` (and no `bus`), writes the files every run directory gets (events.jsonl, metric
  files, experiment.log, run.json) as `tuitrain run` does, and obeys `tuitrain stop` / `checkpoint`
  through the run directory's control folder while it trains; a `run_dir` that holds another run
  already is not appended to: the run goes to `run_dir-2` (`-3` ...), unless fit resumes;
- `fit(..., dashboard="auto")` shows the dashboard on a terminal (the loop on a background thread), the
  headless console lines elsewhere, nothing with False; Ctrl+C and SIGTERM stop gracefully, as under
  the CLI. textual is imported only when a dashboard opens.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from pathlib import Path
from typing import Any
from collections.abc import Callable

from tuitrain.core.callbacks import EventBus
from tuitrain.core.control import raise_in
from tuitrain.core.learner import CoreLearner
from tuitrain.core.state import EXIT_FAILED, FitResult
from tuitrain.core.sections import Experiment
from tuitrain.run.directories import claim_run_dir
from tuitrain.run.session import RunSession
from tuitrain.run.signals import StopOnSignals

SCREENS = ("auto", True, False)


def in_notebook() -> bool:
    """A Jupyter kernel: its stdout may claim a terminal, but no dashboard can draw there."""
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    try:
        return get is not None and get() is not None and "IPKernelApp" in get().config
    except Exception:
        return False


def has_terminal() -> bool:
    try:
        return sys.stdout is not None and sys.stdout.isatty() and not in_notebook()
    except (AttributeError, ValueError):
        return False


def screen_for(dashboard: Any) -> str:
    """ "dashboard" (a terminal), "notebook" (a Jupyter kernel: the dashboard as a picture in the cell,
    tuitrain/run/notebook.py), "console" or "none" for fit's `dashboard` argument; ValueError when
    impossible."""
    if dashboard not in SCREENS or not isinstance(dashboard, (str, bool)):
        raise ValueError(f'dashboard must be "auto", True or False, not {dashboard!r}')
    if dashboard is False:
        return "none"
    if in_notebook():
        return "notebook"
    if has_terminal():
        return "dashboard"
    if dashboard is True:
        raise ValueError(
            "fit(dashboard=True) needs a terminal or a notebook, and stdout is neither; use "
            'dashboard="auto" for progress lines, or False for silence'
        )
    return "console"


class _FitUnderDashboard:
    """What the dashboard drives (`subscribe`, `execute`, `interrupter`, `run_dir`): one `fit`."""

    def __init__(self, learner: Learner, fit: Callable[[], FitResult]) -> None:
        self.learner = learner
        self.interrupter = learner.interrupter
        self.run_dir = learner.run_dir
        self._fit = fit
        self.result: FitResult | None = None
        self.started = False
        self.done = threading.Event()

    @property
    def bus(self):
        return self.learner.bus

    def subscribe(self, callback: Callable, steps: bool | str | None = None) -> None:
        self.learner.bus.subscribe(callback, steps)

    def execute(self) -> int:
        self.started = True
        try:
            self.result = self._fit()
        finally:
            self.done.set()
        return self.result.exit_code


class Learner(CoreLearner):
    __doc__ = CoreLearner.__doc__

    @functools.wraps(CoreLearner.__init__)  # help() and IDEs show the core's keyword arguments
    def __init__(self, *args, run_dir=None, bus=None, sinks=None, alerts=None, **kwargs) -> None:
        # a bus or sinks given by the caller already write what they should: the run directory's files
        # come from the session only without them
        self._own_files = run_dir is not None and bus is None and sinks is None
        experiment = kwargs.get("experiment")
        name = experiment.name if isinstance(experiment, Experiment) else experiment
        if not name and run_dir is not None:  # what experiment.log and run.json call the run
            name = Path(run_dir).resolve().name
            kwargs["experiment"] = (
                dataclasses.replace(experiment, name=name) if isinstance(experiment, Experiment) else name
            )
        if sinks:  # writers of the event stream (files, a console): persistent events only
            bus = bus if bus is not None else EventBus()
            for sink in sinks:
                bus.subscribe(sink, steps=False)
        super().__init__(*args, run_dir=run_dir, bus=bus, **kwargs)
        self._fits = 0  # fits begun: the first one claims the run directory
        from tuitrain.core.health import Alerts

        self.alerts = Alerts.of(alerts)  # where AlertRaised goes besides the events (a webhook, a command)

    def fit(
        self,
        train_data,
        valid_data=None,
        resume=None,
        resumed_from=None,
        *,
        dashboard: Any = "auto",
        theme: str | Path | None = None,
    ) -> FitResult:
        """Train; returns a FitResult (errors in user code do not raise: status "failed").

        `dashboard`: "auto" shows the dashboard when stdout is a terminal, inline in a Jupyter notebook
        (with a run_dir: a picture redrawn about once a second), and the headless console's progress lines
        otherwise; True demands a terminal or a notebook (ValueError without one); False prints nothing.
        Under the dashboard, fit returns once the user leaves it. `theme`: a shipped theme's name or a
        .tcss file. `resume`: a checkpoint path or a loaded checkpoint."""
        # from here on the first Ctrl+C (a kernel's interrupt) is a graceful stop, even one that comes
        # while the run is being set up; under the dashboard Ctrl+C is its key
        with StopOnSignals(self.interrupter, sigint=screen_for(dashboard) != "dashboard"):
            return self._fit_on_screen(train_data, valid_data, resume, resumed_from, dashboard, theme)

    async def fit_async(
        self,
        train_data,
        valid_data=None,
        resume=None,
        resumed_from=None,
        *,
        dashboard: Any = "auto",
        theme: str | Path | None = None,
    ) -> FitResult:
        """`fit` on a background thread, awaited: `result = await learner.fit_async(...)`. In a notebook
        the kernel stays free while the run trains, so the Stop, Pause and Checkpoint buttons under the
        picture act on it (ipywidgets installed); the kernel's interrupt stops gracefully, a second one
        ends the run at once. Under a terminal's dashboard (which trains on a thread of its own) it is
        `fit`."""
        import asyncio
        import contextvars

        if screen_for(dashboard) == "dashboard":
            return self.fit(train_data, valid_data, resume, resumed_from, dashboard=dashboard, theme=theme)
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        context = contextvars.copy_context()  # the cell's output (ipykernel keeps its parent message there)

        def work() -> None:
            try:
                result = context.run(
                    self._fit_on_screen, train_data, valid_data, resume, resumed_from, dashboard, theme, True
                )
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting cell
                loop.call_soon_threadsafe(_settle, done, None, e)
            else:
                loop.call_soon_threadsafe(_settle, done, result, None)

        thread = threading.Thread(target=work, name="tuitrain-fit", daemon=True)
        with StopOnSignals(self.interrupter, sigint=True, then=lambda: raise_in(thread, KeyboardInterrupt)):
            thread.start()
            return await asyncio.shield(done)

    def _fit_on_screen(
        self,
        train_data,
        valid_data,
        resume,
        resumed_from,
        dashboard: Any,
        theme: str | Path | None,
        buttons: bool = False,
    ) -> FitResult:
        screen = screen_for(dashboard)
        theme_file = None
        if screen == "dashboard":
            from tuitrain.dashboard.themes import resolve_theme

            theme_file = resolve_theme(str(theme or "dark"), Path.cwd())  # ThemeError is a ValueError
        if resume is not None:  # a checkpoint this model cannot take is refused before the run directory is written
            resume, resumed_from = self._fitting(resume, resumed_from)
        # with a run directory the session writes it and `tuitrain stop/checkpoint RUN_DIR` reach this run
        session = view = None
        note = self._claim_run_dir(resume)
        self._fits += 1
        if screen == "notebook" and (self.run_dir is None or not self._own_files):
            # the notebook's picture is drawn from the run directory's files
            screen, note = (
                "console",
                "in a notebook the dashboard is drawn from the run directory: give the "
                "Learner a run_dir to see it here",
            )
            self.notes.append(note)
        if self.run_dir is not None:
            # the devices sampled into the events where a screen shows them (the dashboard, a notebook's picture)
            session = RunSession(
                self.run_dir,
                interrupter=self.interrupter,
                bus=self.bus,
                devices=screen in ("notebook", "dashboard"),
                files=self._own_files,
                alerts=self.alerts,
            ).open()
        else:
            from tuitrain.sinks.alerts import alert_sender

            sender = alert_sender(self.alerts, say=self.bus.emit)
            if sender is not None:
                self.bus.subscribe(sender, steps=False)
        core_fit = functools.partial(super().fit, train_data, valid_data, resume, resumed_from)
        captured = self.capture_output
        try:
            if screen == "dashboard":
                return self._fit_under_dashboard(core_fit, theme_file)
            if screen == "notebook":  # the picture in this cell; the kernel's interrupt stops gracefully
                from tuitrain.run.notebook import NotebookView

                view = NotebookView(self.run_dir, theme, controls=self.interrupter if buttons else None).open()
                self.capture_output = True  # what the code prints goes to the picture's output panel and the log
            if screen == "console":
                from tuitrain.sinks.console import HeadlessConsole

                self.bus.subscribe(HeadlessConsole(), steps=False)
            return core_fit()
        finally:
            self.capture_output = captured
            if session is not None:
                session.close()
            if view is not None:  # after the session: the run's last events are in its files
                view.close()
            if note in self.notes:
                self.notes.remove(note)

    def _fitting(self, resume, resumed_from) -> tuple[Any, Any]:
        """`resume` loaded (a path: once, here) and checked against this learner's model and optimizers: a
        ValueError naming what differs, before anything is written (as `tuitrain run --resume` refuses it)."""
        from tuitrain.core import checkpoint as ckpt

        data = resume if isinstance(resume, dict) else ckpt.load_checkpoint(resume)
        where = resumed_from or ("" if isinstance(resume, dict) else resume)
        misfit = self.ckpt_io.mismatch(data, "this Learner's")
        if misfit:
            raise ValueError(
                f"fit(resume={str(where or 'a checkpoint')!r}): it does not fit: {misfit}; nothing was changed"
            )
        return data, where

    def _claim_run_dir(self, resume) -> str | None:
        """One run per folder: a first fit (no resume) whose run_dir holds a run already goes to the next
        free `run_dir-2`, `-3` ... instead, the checkpoints and model.pt with it; the line that says so
        (in the log, the console, the dashboard) is returned. The same Learner's next fit continues its
        own run where it is, as a resume does."""
        if self._fits or resume is not None or not self._own_files:
            return None
        old = self.run_dir
        new = claim_run_dir(old)
        if new == old:
            return None
        self.run_dir = self.guard.run_dir = new
        checkpoints = self.ckpt_io
        if checkpoints.model_path is not None and Path(checkpoints.model_path) == old / "model.pt":
            checkpoints.model_path = new / "model.pt"
        if self.checkpointer is not None and self.checkpointer.folder == old / "checkpoint":
            self.checkpointer.folder = new / "checkpoint"  # nothing read from it yet: the first fit prepares it
        note = f"{old} holds a run already: this run goes to {new} (fit(resume=...) continues that one)"
        self.notes.append(note)
        return note

    def _fit_under_dashboard(self, core_fit: Callable[[], FitResult], theme: Path | None) -> FitResult:
        from tuitrain.dashboard.entry import run_live

        captured = self.capture_output
        self.capture_output = True  # what the user's code prints goes to the output panel, not over the screen
        run = _FitUnderDashboard(self, core_fit)
        try:
            with StopOnSignals(self.interrupter, sigint=False):  # the dashboard reads Ctrl+C as a key
                code = run_live(run, theme)
            if run.started:
                run.done.wait()  # leaving asked for a stop: the loop ends at its next step boundary
        finally:
            self.capture_output = captured
        if run.result is not None:
            return run.result
        return FitResult(
            self.raw_model,
            "failed",
            EXIT_FAILED if code != 130 else code,
            "failed",
            {},
            {},
            error="training ended without a result",
        )


def _settle(future, result, error) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
