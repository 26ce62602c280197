"""`Monitor`: a run directory, the dashboard and the controls for a training loop of the user's own.

    with Monitor(experiment="mygpt", config={"lr": 3e-3}) as mon:
        for step in range(1, steps + 1):
            ...
            mon.log(step, loss=loss.detach(), lr=lr)
            if mon.checkpoint_requested:
                mon.save_checkpoint({"model": model.state_dict(), "step": step})
            if mon.stop_requested:
                break

`log` only appends to a list: a thread of the Monitor's reads the values (a tensor's `.item()` there,
never on the loop's thread), emits the events and the sinks write the files. On a terminal the
dashboard runs in a process of its own (`tuitrain watch`, steering through the control folder), so the
loop keeps the main thread; what the loop prints goes to experiment.log and the dashboard's output
panel instead of over the screen. Must not import textual.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from tuitrain.core import checkpoint as ckpt
from tuitrain.core.callbacks import EventBus
from tuitrain.core.control import ControlWatcher, Interrupter
from tuitrain.core.events import (ControlReceived, MetricsLogged, RunFailed, RunFinished, RunPaused, RunResumed,
                                  RunStarted)
from tuitrain.core.fsutil import atomic_write_text
from tuitrain.core.output import capture_output
from tuitrain.run.directories import fresh_run_dir
from tuitrain.run.learner import screen_for
from tuitrain.run.signals import StopOnSignals
from tuitrain.sinks.standard import standard_sinks

FLUSH_INTERVAL = 0.2  # seconds between the Monitor thread's passes over what `log` appended


def _number(value: Any) -> float:
    item = getattr(value, "item", None)  # a 0-d tensor (read here, off the loop's thread) or a numpy scalar
    return float(item() if item is not None else value)


class Monitor:
    """A run directory, the dashboard and stop/pause/checkpoint for your own loop (a context manager).

    experiment: the run's name (default: the run folder's name); config: a dict, written to config.toml
    and shown by `tuitrain watch`; run_dir: where the run goes (default `dir/experiment/<timestamp>`);
    dashboard: "auto" (a terminal: the dashboard; else the headless console lines), True (a terminal or
    ValueError) or False (nothing printed); theme: the dashboard's theme; keep_last: checkpoints kept;
    max_steps: the steps the loop will take, if known (a progress bar and an ETA); batch_size: items per
    step, if known (items/s beside it/s).
    """

    def __init__(self, experiment: str = "", config: dict | None = None, run_dir: str | os.PathLike | None = None,
                 dashboard: Any = "auto", *, dir: str | os.PathLike = "runs", theme: str | None = None,
                 keep_last: int = 3, max_steps: int = 0, batch_size: int = 0) -> None:
        for name, value in (("max_steps", max_steps), ("batch_size", batch_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Monitor({name}=...) takes a whole number of 0 or more, not {value!r}")
        self.max_steps, self.batch_size = max_steps, batch_size
        self.screen = screen_for(dashboard)
        if run_dir is None:
            run_dir = fresh_run_dir(Path(dir) / (experiment or "monitor"))
        self.run_dir = Path(run_dir)
        self.experiment = experiment or self.run_dir.resolve().name
        self.config = dict(config or {})
        self.theme = theme
        self.keep_last = keep_last
        self.interrupter = Interrupter()
        self.step = 0
        self._pending: list[tuple[int, str, dict, float]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._t0 = 0.0
        self._last: dict[str, dict[str, float]] = {}
        self._summary: dict[str, dict] = {}  # "split/name" -> min, max, last (the run's summary table)
        self._stack = contextlib.ExitStack()
        self._viewer: subprocess.Popen | None = None

    # --- the loop's side ---------------------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        """`q`/`y` or Ctrl+C in the dashboard, Ctrl+C or SIGTERM here, or `tuitrain stop RUN_DIR`; or
        the run directory could not be written (a full disk): the block ends as a failed run."""
        return self.interrupter.stop_requested or bool(self.interrupter.failure)

    @property
    def checkpoint_requested(self) -> bool:
        """`c` in the dashboard or `tuitrain checkpoint RUN_DIR`; `save_checkpoint` answers it."""
        return self.interrupter.checkpoint_requested

    def log(self, step: int, split: str = "train", **values: Any) -> None:
        """Record values (numbers or 0-d tensors) at `step`; a paused run waits here until resumed."""
        self.step = max(self.step, step)
        with self._lock:
            self._pending.append((step, split, values, time.time()))
        if self.interrupter.pending and self.interrupter.paused and not self.interrupter.stop_requested:
            self._wait_while_paused()

    def save_checkpoint(self, state: dict, step: int | None = None) -> Path:
        """Write `state` atomically into checkpoint/ (listed in its index.json, loadable with
        `torch.load(path, weights_only=True)` when it holds tensors and plain values); its path."""
        step = self.step if step is None else step
        reason = "request" if self.interrupter.take_checkpoint() else "api"
        metrics = {f"{split}/{k}": v for split, vals in self._last.items() for k, v in vals.items()}
        self._checkpointer.save(ckpt.snapshot(state), epoch=0, step=step, metrics=metrics, reason=reason)
        self._checkpointer.wait()
        for event in self._checkpointer.take_events():
            self.bus.emit(event)
        return self.run_dir / "checkpoint" / (ckpt.checkpoint_name(0, step) + ".pt")

    def _wait_while_paused(self) -> None:
        it = self.interrupter
        self._flush()
        t0 = time.monotonic()
        self.bus.emit(RunPaused(epoch=0, step=self.step))
        while it.paused and not it.stop_requested and not it.failure:
            it.wait_while_paused(0.1)
            self._flush()
        self.bus.emit(RunResumed(epoch=0, step=self.step, paused_for=time.monotonic() - t0))

    # --- the Monitor's thread ------------------------------------------------------------------

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        for step, split, values, t in batch:
            metrics = {}
            for name, value in values.items():
                try:
                    metrics[name] = _number(value)
                except (TypeError, ValueError, RuntimeError):
                    continue  # not a number: left out rather than stopping the run
            self._last.setdefault(split, {}).update(metrics)
            for name, v in metrics.items():
                if v == v:  # NaN has no place in a min or a max
                    # no epochs in a loop of one's own: the summary table leaves its Epoch columns out
                    row = self._summary.setdefault(f"{split}/{name}", {"min": v, "max": v, "last": v})
                    row["min"], row["max"], row["last"] = min(row["min"], v), max(row["max"], v), v
            self.bus.emit(MetricsLogged(split=split, epoch=0, step=step, metrics=metrics, time=t))
        for command, source, detail in self.interrupter.take_log():
            self.bus.emit(ControlReceived(command=command, source=source, detail=detail))
        self.interrupter.settle()

    def _pump(self) -> None:
        while not self._closing:
            self._wake.wait(FLUSH_INTERVAL)
            self._flush()

    # --- the block -------------------------------------------------------------------------------

    def __enter__(self) -> "Monitor":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self.bus = EventBus()
        self.bus.on_write_failure.append(self.interrupter.fail)
        for sink in standard_sinks(self.run_dir):
            self.bus.subscribe(sink, steps=False)
        if self.screen == "console":
            from tuitrain.sinks.console import HeadlessConsole

            self.bus.subscribe(HeadlessConsole(), steps=False)
        self._checkpointer = ckpt.Checkpointer(self.run_dir / "checkpoint", keep_last=self.keep_last, keep_best=0)
        self._checkpointer.prepare()
        self._watcher = ControlWatcher(self.run_dir, self.interrupter).start()
        from tuitrain.core.devices import DeviceMonitor

        self._devices = DeviceMonitor(self.bus.emit)  # the devices panel: CPU, memory, GPUs
        self.bus.subscribe(self._devices.start_on_run_started, steps=False)
        self._t0 = time.monotonic()
        from tuitrain.core.learner import env_info  # torch: the user's loop has imported it already

        import torch

        self.bus.emit(RunStarted(run_dir=str(self.run_dir), experiment=self.experiment, epochs=0,
                                 max_steps=self.max_steps, steps_per_epoch=0, batch_size=self.batch_size, pid=os.getpid(),
                                 env=env_info(torch.device("cpu")), config=self.config))
        self._stack.enter_context(StopOnSignals(self.interrupter, sigint=True))
        if self.screen == "dashboard":
            self._open_viewer()
        if self.screen != "none":  # prints go to experiment.log (and the screen's output panel)
            self._stack.enter_context(capture_output(self.bus.emit))
        self._thread = threading.Thread(target=self._pump, name="tuitrain-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._closing = True
        self._wake.set()
        self._thread.join()
        self._flush()
        duration = time.monotonic() - self._t0
        try:
            self._stack.close()  # output capture and signal handlers end here
        finally:
            summary = dict(self._summary)
            self.bus.deliver()
            failure = self.bus.write_failure
            if failure is not None:  # the run directory could not be written: one line, no traceback
                last = self._checkpointer.last_complete()
                self.bus.emit(RunFailed(error=failure[0], traceback=failure[1], epoch=0, step=self.step,
                                        duration=duration, summary=summary, cause="write_failed",
                                        checkpoint=str(last or "")))
            elif exc is not None and not isinstance(exc, KeyboardInterrupt):
                self.bus.emit(RunFailed(error=f"{type(exc).__name__}: {exc}",
                                        traceback="".join(traceback.format_exception(exc_type, exc, tb)),
                                        epoch=0, step=self.step, duration=duration, summary=summary))
            else:
                stopped = self.interrupter.stop_requested or exc is not None
                self.bus.emit(RunFinished(status="interrupted" if stopped else "completed",
                                          exit_code=130 if stopped else 0, epoch=0, step=self.step,
                                          reason="stopped" if stopped else "completed", duration=duration,
                                          summary=summary, best={}))
            self._watcher.close()
            self._devices.close()
            self.bus.close()
            self._close_viewer()
        return False  # an exception in the block propagates

    def _write_config(self) -> None:
        from tuitrain.config.toml_writer import dumps

        try:
            text = dumps(self.config)
        except Exception:  # values TOML cannot hold: as JSON, with what is not JSON as text
            atomic_write_text(self.run_dir / "config.json", json.dumps(self.config, indent=2, default=str))
            return
        atomic_write_text(self.run_dir / "config.toml", text)

    # --- the dashboard, in a process of its own ----------------------------------------------------

    def _open_viewer(self) -> None:
        """`tuitrain watch RUN_DIR` on this terminal; this process's own output goes to a file meanwhile,
        so nothing the loop or a library writes can tear the screen."""
        cmd = [sys.executable, "-m", "tuitrain", "watch", str(self.run_dir), "--owned"]
        if self.theme:
            cmd += ["--theme", str(self.theme)]
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved_fds = (os.dup(1), os.dup(2))
        self._viewer = subprocess.Popen(cmd, stdin=sys.stdin, stdout=self._saved_fds[0], stderr=self._saved_fds[1])
        raw = os.open(self.run_dir / "output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(raw, 1)
        os.dup2(raw, 2)
        os.close(raw)

    def _close_viewer(self) -> None:
        if self._viewer is None:
            return
        try:
            self._viewer.wait()  # the dashboard shows the summary until the user leaves it
        except KeyboardInterrupt:
            self._viewer.terminate()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(self._saved_fds[0], 1)
            os.dup2(self._saved_fds[1], 2)
            for fd in self._saved_fds:
                os.close(fd)
            self._viewer = None
