"""Rank 0's side of a `Monitor`'s run: the `RunSession` (the files, the console, the signals, the
alerts), the checkpointer, the media log, the screen (the dashboard in a process of its own, a
notebook's picture in the cell, or the headless lines), what the loop prints captured, and the
Monitor's thread (monitor_pump.py) started; then all of it ended, in order, with the run's last event.
Must not import textual.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tuitrain.core import checkpoint as ckpt
from tuitrain.core.events import OutputPrinted, RunStarted
from tuitrain.core.lifecycle import Lifecycle
from tuitrain.core.state import RunDirUnwritable
from tuitrain.run.session import RunSession
from tuitrain.run.viewer import Viewer


class OwnedRun:
    """Opened for a started `Monitor` (`mon`: its settings, interrupter, pump and health are read here)
    on the rank that owns the run; `life` is the run's `Lifecycle`, `bus` its event bus."""

    def __init__(self, mon: Any) -> None:
        from tuitrain.core.media import MediaLog

        self.mon = mon
        self.run_dir = run_dir = Path(mon.run_dir)
        self.session = RunSession(
            run_dir,
            config=mon.config,
            interrupter=mon.interrupter,
            console=mon.screen == "console",
            signals="sigint",
            alerts=mon.alerts,
        )
        self.session.open()
        self.bus = bus = self.session.bus
        self.checkpointer = ckpt.Checkpointer(
            run_dir / "checkpoint", keep_last=mon.keep_last, keep_best=0, keep_requested=mon.keep_requested
        )
        self.checkpointer.prepare()
        pump = mon._pump
        self.life = pump.life = Lifecycle(bus, mon._flags, chores=pump.flush)
        pump.emit, pump.health = bus.emit, mon.health
        pump.stop = lambda title: mon.interrupter.request_stop("watch", title)
        pump.after = lambda: None if mon._ranks.synced is not None else mon.interrupter.settle()
        self.media = MediaLog(run_dir, bus.emit, keep=mon.media_keep, epoch=lambda: mon.epoch)
        self.viewer: Viewer | None = None
        self.view: Any = None  # in a notebook: the picture in the cell (tuitrain/run/notebook.py)
        self.capture: Any = None

    def open(self) -> OwnedRun:
        """`RunStarted`, the screen, the output captured, the thread started."""
        import torch  # the user's loop has imported it already

        from tuitrain.core.environment import env_info

        mon, bus, run_dir = self.mon, self.bus, self.run_dir
        ranks = {"strategy": "ddp", "world_size": mon.world_size} if mon.world_size > 1 else {}
        started = RunStarted(
            run_dir=str(run_dir),
            experiment=mon.experiment,
            epochs=mon.epochs,
            max_steps=mon.max_steps,
            steps_per_epoch=0,
            batch_size=mon.batch_size,
            pid=os.getpid(),
            env={**env_info(torch.device("cpu")), **ranks},
            config=mon.config,
            loop=mon.loop,
        )
        bus.emit(started)
        given = mon._given_dir
        if given is not None and run_dir != given:
            bus.emit(OutputPrinted(text=f"{given} holds a run already: this run goes to {run_dir}", stream="tuitrain"))
        if mon.screen == "dashboard":
            self.viewer = Viewer(run_dir, mon.theme).open()
        elif mon.screen == "notebook":  # the picture in this cell; the kernel's interrupt stops gracefully
            from tuitrain.run.notebook import NotebookView

            self.view = NotebookView(run_dir, mon.theme).open()
        if mon.screen != "none":  # prints go to experiment.log (and the screen's output panel)
            from tuitrain.core.output import capture_output

            self.capture = capture_output(bus.emit)
            self.capture.__enter__()
        mon._pump.start(self._without_the_screen)
        return self

    def _without_the_screen(self) -> None:
        """The dashboard failed while the loop goes on: the terminal back, the headless lines from now on."""
        if self.viewer is None or not self.viewer.failed:
            return
        from tuitrain.sinks.console import HeadlessConsole

        self.viewer.give_back()
        # to the terminal itself: sys.stdout is the loop's, captured into experiment.log
        self.bus.subscribe(HeadlessConsole(stream=sys.__stdout__, err=sys.__stderr__), steps=False)
        self.bus.emit(OutputPrinted(text="the dashboard failed; training goes on without it", stream="tuitrain"))

    def save(self, state: dict, **how: Any) -> None:
        """`state` written into checkpoint/ (`Checkpointer.save`'s keywords), the metrics as they stand."""
        self.checkpointer.save(ckpt.snapshot(state), metrics=self.mon._pump.metrics(), **how)
        self.said_checkpoints()

    def adopt(self, path: str | os.PathLike, metrics: dict | None, **how: Any) -> None:
        """A checkpoint another library wrote listed (`Checkpointer.adopt`'s keywords)."""
        metrics = self.mon._pump.metrics() if metrics is None else metrics
        self.checkpointer.adopt(path, metrics=metrics, **how)
        self.said_checkpoints()

    def said_checkpoints(self) -> None:
        """A checkpoint's events said, after what was logged before it (the request's own event first)."""
        self.mon._pump.flush()
        self.checkpointer.wait()
        for event in self.checkpointer.take_events():
            self.bus.emit(event)

    def close(self, error: BaseException | None, epoch: int, step: int) -> None:
        """The run's end: failed on `error` (a KeyboardInterrupt: interrupted) or when the run directory
        could not be written; else finished, "stopped" when a stop was asked for, "completed" otherwise."""
        pump = self.mon._pump
        pump.close()
        self.media.close()  # what was logged is written and said before the end
        pump.flush()
        life = self.life
        try:
            if self.capture is not None:
                self.capture.__exit__(None, None, None)
        finally:
            self.bus.deliver()
            failure = self.bus.write_failure
            if failure is not None:  # the run directory could not be written: one line, no traceback
                last = self.checkpointer.last_complete()
                life.failed(RunDirUnwritable(*failure), epoch=epoch, step=step, checkpoint=str(last or ""))
            elif error is not None and not isinstance(error, KeyboardInterrupt):
                life.failed(error, epoch=epoch, step=step)
            else:
                stopped = self.mon._flags.stop_requested or error is not None
                reason = "stopped" if stopped else "completed"
                life.finished(reason, epoch=epoch, step=step)
            self.session.close()
            if self.viewer is not None:
                self.viewer.close()
                self.viewer = None
            if self.view is not None:  # after the session: the run's last events are in its files
                self.view.close()
