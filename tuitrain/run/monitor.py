"""`Monitor`: a run directory, the dashboard and the controls for a training loop of the user's own.

    with Monitor(experiment="mygpt", config={"lr": 3e-3}) as mon:       # or mon = Monitor(...).start()
        for step in range(1, steps + 1):
            ...
            mon.log(step, loss=loss.detach(), lr=lr)
            if mon.checkpoint_requested:
                mon.save_checkpoint({"model": model.state_dict(), "step": step})
            if mon.stop_requested:
                break
                                                                        # ... mon.finish()

`log` only appends to a list: a thread of the Monitor's reads the values (a tensor's `.item()` there,
never on the loop's thread), emits the events and the sinks write the files. On a terminal the
dashboard runs in a process of its own (`tuitrain watch`, steering through the control folder), so the
loop keeps the main thread; what the loop prints goes to experiment.log and the dashboard's output
panel instead of over the screen. The run directory is a `RunSession`'s.

Across ranks (torchrun, or any initialized process group): every rank makes its Monitor; rank 0 alone
owns the run directory, the files, the console and the dashboard, and the others' `log` is a no-op.
`stop_requested` is the agreement tick (a `SyncedInterrupter` on a gloo group): each rank's requests
(rank 0's `tuitrain stop`, a signal to any rank) are combined, an exchange about every 50 ms of the
loop, started asynchronously and read one exchange later, so every rank gets the same answer at the
same call. `checkpoint_requested` reads the last agreed value, with no collective of its own; a pause
waits inside `stop_requested`, in short exchanges. Must not import textual.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

from tuitrain.core import checkpoint as ckpt
from tuitrain.core.control import Interrupter, stop_asked_for
from tuitrain.core.events import MetricsLogged, OutputPrinted, RunStarted
from tuitrain.run.viewer import Viewer
from tuitrain.core.lifecycle import Lifecycle
from tuitrain.core.state import RunDirUnwritable
from tuitrain.run.directories import claim_run_dir, fresh_run_dir
from tuitrain.run.learner import screen_for
from tuitrain.run.session import RunSession, placement
from tuitrain.run.signals import StopOnSignals

FLUSH_INTERVAL = 0.2  # seconds between the Monitor thread's passes over what `log` appended


class _Quiet:
    """The events of a rank other than 0: said nowhere (rank 0 owns the run's events)."""
    emit = staticmethod(lambda event: None)


#: the levels `Monitor.alert` takes, as W&B's and trackio's alerts have them ("warn" is a warning)
ALERT_LEVELS = {"info": "info", "warning": "warning", "warn": "warning", "error": "error"}


def _text(value: Any) -> str:
    """`value` as a string for an alert, whatever it is (an object whose str() fails: its type)."""
    if isinstance(value, str) or value is None:
        return value or ""
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _number(value: Any) -> float:
    item = getattr(value, "item", None)  # a 0-d tensor (read here, off the loop's thread) or a numpy scalar
    return float(item() if item is not None else value)


class Monitor:
    """A run directory, the dashboard and stop/pause/checkpoint for your own loop.

    A context manager, or `mon = Monitor(...).start()` ... `mon.finish()` for a loop at a script's top
    level (an exception that ends the script, or the interpreter exiting, finishes it as failed or as it
    stands). experiment: the run's name (default: the run folder's name); config: a dict, written to
    config.toml and shown by `tuitrain watch`; run_dir: where the run goes (default
    `dir/experiment/<timestamp>`; one that holds a run already: `run_dir-2`, `-3` ...); dashboard:
    "auto" (a terminal: the dashboard; a Jupyter notebook: the dashboard as a picture in the cell,
    redrawn about once a second; else the headless console lines), True (a terminal, a notebook or
    ValueError) or False (nothing printed); theme: the dashboard's theme; keep_last: checkpoints kept,
    of those not asked for; keep_requested: those asked for (saved when `checkpoint_requested` was
    raised, or after a stop was) kept, 0: all; max_steps: the steps the
    loop will take, if known (a progress bar and an ETA); batch_size: items per step, if known (items/s
    beside it/s); epochs: the epochs it will run, if it counts them (`mon.epoch = n` as each begins);
    watch: the `[watch]` rules for what `log` is given (spikes and non-finite values of `loss` and
    `grad_norm`: alerts, and "stop" sets `stop_requested`); alerts: the `[alerts]` table (a webhook, a command).
    """

    #: a stop (q y, Ctrl+C, SIGTERM, `tuitrain stop`, a [watch] rule's) also raises `checkpoint_requested`,
    #: once, and `stop_requested` says True one call later than it would if the loop has not been shown
    #: the request yet: a loop that checks both saves a checkpoint at the stop, whichever it checks
    #: first. The integrations turn it off: they save at a stop themselves.
    checkpoint_on_stop = True
    loop = "monitor"  #: RunStarted.loop: an integration says which framework's loop it is
    _stop_seen = False  # a stop was seen (its checkpoint raised, when checkpoint_on_stop)
    _stop_checkpoint = ""  # the stop's checkpoint: "due" (raised), "shown" (told to the loop), "" (none or taken)

    def __init__(self, experiment: str = "", config: dict | None = None, run_dir: str | os.PathLike | None = None,
                 dashboard: Any = "auto", *, dir: str | os.PathLike = "runs", theme: str | None = None,
                 keep_last: int = 3, max_steps: int = 0, batch_size: int = 0, epochs: int = 0,
                 watch: dict | None = None, alerts: dict | None = None, keep_requested: int = 0,
                 media_keep: int = 100) -> None:
        from tuitrain.core.health import Alerts, Health, Watch

        self.health = Health(Watch.of(watch))  # a bad key or action is a ValueError here, on every rank
        self.alerts = Alerts.of(alerts)
        for name, value in (("max_steps", max_steps), ("batch_size", batch_size), ("epochs", epochs),
                            ("keep_requested", keep_requested), ("media_keep", media_keep)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Monitor({name}=...) takes a whole number of 0 or more, not {value!r}")
        screen_for(dashboard)  # a bad value is an error here, on every rank
        if theme:
            from tuitrain.dashboard.themes import resolve_theme

            theme = str(resolve_theme(str(theme), Path.cwd()))  # ThemeError (a ValueError) names the themes
        self.max_steps, self.batch_size, self.epochs = max_steps, batch_size, epochs
        #: the epoch the loop is in, if it counts epochs: set it, and what `log` records carries it
        self.epoch = 0
        self._dashboard = dashboard
        self._given_dir = Path(run_dir) if run_dir is not None else None
        self._root = Path(dir)
        self.run_dir: Path | None = self._given_dir
        self.experiment = experiment
        self.config = dict(config or {})
        self.theme = theme
        self.keep_last, self.keep_requested = keep_last, keep_requested
        self.media_keep = media_keep
        self._media = None  # the run's MediaLog (tuitrain/core/media.py) once started, on rank 0
        self.interrupter = Interrupter()  # this rank's requests (the agreement combines them)
        self.rank, self.world_size, self.owner = 0, 1, True
        self.screen = "none"
        self.step = 0
        self._synced = None  # a SyncedInterrupter when ranks must agree
        self._group_pending = False  # ranks known (torchrun) but no process group yet: agree once there is
        self._pending: list[tuple[int, str, dict, float, int]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._started = False
        self._finished = False
        self._request_by = ""  # who asked for the checkpoint request taken and not yet saved
        self._odd_levels: set[str] = set()  # alert levels not known, said once each
        self._error: BaseException | None = None
        self._last: dict[str, dict[str, float]] = {}
        #: the run's life (core/lifecycle.py): control said, pauses, the summary, the end; on every rank
        #: (those other than 0 say nothing: their pauses wait, quietly)
        self._life = Lifecycle(_Quiet(), self.interrupter)
        self._session: RunSession | None = None
        self.bus = None  # the run's event bus, on rank 0 once started
        self._signals: StopOnSignals | None = None
        self._viewer: Viewer | None = None
        self._view = None  # in a notebook: the picture in the cell (tuitrain/run/notebook.py)
        self._rank_fds: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._prev_excepthook = None

    # --- the loop's side ---------------------------------------------------------------------

    @property
    def _flags(self) -> Interrupter:
        return self._synced if self._synced is not None else self.interrupter

    @property
    def stop_requested(self) -> bool:
        """`q`/`y` or Ctrl+C in the dashboard, Ctrl+C or SIGTERM here, or `tuitrain stop RUN_DIR`; or
        the run directory could not be written (a full disk): the run ends as failed. Across ranks, the
        agreement tick: read it on every rank at the same points; a pause waits here."""
        if self._group_pending:
            self._join_group()
        synced = self._synced
        if synced is None:
            it = self.interrupter
            if it.paused and not it.stop_requested and self.owner:  # a loop that logs rarely pauses here too
                self._wait_while_paused()
            stop = it.stop_requested or bool(it.failure)
        else:
            synced.pending  # noqa: B018 - the tick: an exchange now and then
            if synced.paused and not synced.stop_requested:
                self._wait_while_paused()
            stop = synced.stop_requested
        self._see_stop()
        if stop and self._stop_checkpoint == "due":  # one more pass, to save the checkpoint the stop raised
            self._stop_checkpoint = "shown"
            return False
        return stop

    @property
    def checkpoint_requested(self) -> bool:
        """`c` in the dashboard or `tuitrain checkpoint RUN_DIR` (across ranks: as last agreed), or a stop
        (see `checkpoint_on_stop`); it stays True until `save_checkpoint`, `add_checkpoint` or
        `take_checkpoint_request` on this rank."""
        self._see_stop()
        if self._stop_checkpoint == "due":
            self._stop_checkpoint = "shown"
        return self._flags.checkpoint_requested or bool(self._stop_checkpoint)

    def _see_stop(self) -> None:
        """A stop seen for the first time raises the checkpoint it promises. Across ranks this reads the
        agreed stop, which changes only inside `stop_requested`: every rank raises it at the same call."""
        flags = self._flags
        if self._stop_seen or not flags.stop_requested:
            return
        self._stop_seen = True
        if self.checkpoint_on_stop and not (self._synced is None and self.interrupter.failure):
            self._stop_checkpoint = "due"  # in one process a failed write of the run directory saves nothing

    def take_checkpoint_request(self) -> bool:
        """Whether a checkpoint was requested, clearing the request (a framework's own save follows)."""
        by = self._flags.take_checkpoint_by()
        self._request_by = self._request_by or by
        at_stop, self._stop_checkpoint = bool(self._stop_checkpoint), ""
        return bool(by) or at_stop

    def log(self, step: int, split: str = "train", **values: Any) -> None:
        """Record values (numbers or 0-d tensors) at `step`; in one process a paused run waits here
        until resumed. Ranks other than 0: nothing."""
        self.step = max(self.step, step)
        if not self.owner:
            return
        with self._lock:
            self._pending.append((step, split, values, time.time(), self.epoch))
        if self._synced is None and self.interrupter.pending and self.interrupter.paused \
                and not self.interrupter.stop_requested:
            self._wait_while_paused()

    # images, texts and histograms (tuitrain/core/media.py): a copy is taken here, the encoding and the
    # files happen off the loop's thread; ranks other than 0: nothing
    def _media_log(self, what: str, step: int, name: str, value: Any) -> None:
        if self.owner and self._media is None:
            raise RuntimeError(f"Monitor.{what} before start() (use `with Monitor(...) as mon:`)")
        if self.owner:
            getattr(self._media, what[4:])(step, name, value)

    def log_text(self, step: int, name: str, text: str) -> None:
        """A text (a generated sample) at `step`: RUN_DIR/media/<name>/<step>.txt, in the samples panel."""
        self._media_log("log_text", step, name, text)

    def log_image(self, step: int, name: str, images: Any) -> None:
        """An image, or a batch as one grid (a tensor (C,H,W) or (N,C,H,W) of floats in [0,1] or uint8,
        numpy (H,W) or (H,W,C), a PIL image, a list of them): RUN_DIR/media/<name>/<step>.png."""
        self._media_log("log_image", step, name, images)

    def log_histogram(self, step: int, name: str, values: Any) -> None:
        """The distribution of `values` (a tensor, or a list of them counted together) at `step`."""
        self._media_log("log_histogram", step, name, values)

    def alert(self, title: str, text: str = "", level: str = "warning", step: int | None = None,
              value: float | None = None) -> None:
        """Raise an alert of your own: in the run's events and log, on the screen, and to the `[alerts]`
        webhook or command. `level`: "info" (shown, not alarming), "warning" (or "warn") or "error"; any
        other level is a warning, said once in the run's log. Never raises inside your loop for what it
        is given (a title or text not a string is str()'d, a value not a number left out). Ranks other
        than 0: nothing."""
        if not self.owner or self.bus is None:
            return
        from tuitrain.core.events import AlertRaised, OutputPrinted

        self._flush()  # the values logged before it come first
        said = _text(level).strip().lower()
        level = ALERT_LEVELS.get(said, "")
        if not level:
            level = "warning"
            if said not in self._odd_levels:  # once per level, not once per alert
                self._odd_levels.add(said)
                self.bus.emit(OutputPrinted(text=f"[tuitrain] mon.alert: level {said[:40]!r} is not one of info, "
                                                 "warning, error: raised as a warning", stream="tuitrain"))
        try:
            number = None if value is None else _number(value)
        except (TypeError, ValueError, RuntimeError):
            number = None
        try:
            at = self.step if step is None else int(step)
        except (TypeError, ValueError):
            at = self.step
        title = _text(title)
        self.bus.emit(AlertRaised(rule="user", level=level, title=title, text=_text(text) or title,
                                  step=at, value=number, epoch=self.epoch))

    def _judge(self, metrics: dict, step: int, epoch: int) -> None:
        """The spike and non-finite rules on what `log` was given: alerts, and a "stop" rule's stop."""
        from tuitrain.core.events import AlertRaised
        from tuitrain.core.health import doing

        found = []
        if "loss" in metrics:
            found.append(self.health.loss(metrics["loss"], step))
        if "grad_norm" in metrics:
            found.append(self.health.grads(metrics["grad_norm"], step))
        for verdict in found:
            if verdict is None:
                continue
            action = "stop" if verdict.action == "stop" else "alert"  # a loop of its own skips nothing
            text = verdict.text.removesuffix(doing(verdict.action)) + doing(action)
            self.bus.emit(AlertRaised(rule=verdict.rule, level=verdict.level, title=verdict.title, text=text,
                                      step=step, value=verdict.value, action=action, epoch=epoch,
                                      episode=verdict.episode, held=verdict.held))
            if action == "stop":
                self.interrupter.request_stop("watch", verdict.title)

    def _reason(self, reason: str | None = None) -> tuple[str, str]:
        """(reason, who asked for it): a checkpoint made for a request taken is the user's (never
        deleted by keep_last), as is one made once a stop was asked for (q/y, Ctrl+C, `tuitrain stop`)."""
        taken = self.take_checkpoint_request()
        by, self._request_by = self._request_by, ""
        flags = self._flags
        if not by and flags.stop_requested and (taken or reason in (None, "stop")):  # the stop's checkpoint
            reason = reason or "stop"
            by = "stop" if stop_asked_for(flags.stop_source) else ""  # a [watch] rule's: the run's own
        return reason or ("request" if by else "api"), by

    def save_checkpoint(self, state: dict, step: int | None = None) -> Path:
        """Write `state` atomically into checkpoint/ (listed in its index.json, loadable with
        `torch.load(path, weights_only=True)` when it holds tensors and plain values); its path.
        Across ranks only rank 0 writes (call it on every rank, or on rank 0 alone). Made while
        `checkpoint_requested` is raised, or after a stop was asked for, it is marked requested in the
        index: `keep_last` never deletes it (`keep_requested` decides)."""
        step = self.step if step is None else step
        reason, by = self._reason()
        path = self.run_dir / "checkpoint" / (ckpt.checkpoint_name(self.epoch, step) + ".pt")
        if not self.owner:
            return path
        metrics = {f"{split}/{k}": v for split, vals in self._last.items() for k, v in vals.items()}
        self._checkpointer.save(ckpt.snapshot(state), epoch=self.epoch, step=step, metrics=metrics, reason=reason,
                                requested=by)
        self._emit_checkpoint_events()
        return path

    def add_checkpoint(self, path: str | os.PathLike, *, step: int, epoch: int | None = None,
                       metrics: dict | None = None, retain: bool = True, reason: str | None = None) -> None:
        """List a checkpoint another library wrote (a file or a folder) in checkpoint/index.json, with
        its sha256 (rank 0; nothing elsewhere). One inside checkpoint/ falls under `keep_last` unless
        `retain=False`; one elsewhere is never deleted here. `reason`: "request" when one was taken, else
        "api" (or say: "stop", "end" ...); one for a request taken, or after a stop was asked for, is marked
        requested, as `save_checkpoint`'s."""
        reason, by = self._reason(reason)
        epoch = self.epoch if epoch is None else epoch
        if not self.owner:
            return
        if metrics is None:
            metrics = {f"{split}/{k}": v for split, vals in self._last.items() for k, v in vals.items()}
        self._checkpointer.adopt(path, epoch=epoch, step=step, metrics=metrics, reason=reason, retain=retain,
                                 requested=by)
        self._emit_checkpoint_events()

    def _emit_checkpoint_events(self) -> None:
        self._flush()  # the request's own event first
        self._checkpointer.wait()
        for event in self._checkpointer.take_events():
            self.bus.emit(event)

    def _wait_while_paused(self) -> None:
        if self.owner:
            self._flush()
        self._life.pause(self.epoch, self.step)

    # --- the Monitor's thread ------------------------------------------------------------------

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        for step, split, values, t, epoch in batch:
            metrics = {}
            for name, value in values.items():
                try:
                    metrics[name] = _number(value)
                except (TypeError, ValueError, RuntimeError):
                    continue  # not a number: left out rather than stopping the run
            self._last.setdefault(split, {}).update(metrics)
            for name, v in metrics.items():
                # no epochs in a loop of one's own: the summary table leaves its Epoch columns out
                self._life.summary.add(f"{split}/{name}", v)
            self.bus.emit(MetricsLogged(split=split, epoch=epoch, step=step, metrics=metrics, time=t))
            if split == "train":
                self._judge(metrics, step, epoch)
        self._life.report()
        if self._synced is None:
            self.interrupter.settle()

    def _pump(self) -> None:
        while not self._closing:
            self._wake.wait(FLUSH_INTERVAL)
            self._flush()
            if self._viewer is not None and self._viewer.failed and not self._closing:
                self._without_the_screen()

    def _without_the_screen(self) -> None:
        """The dashboard failed while the loop goes on: the terminal back, the headless lines from now on."""
        from tuitrain.sinks.console import HeadlessConsole

        self._viewer.give_back()
        # to the terminal itself: sys.stdout is the loop's, captured into experiment.log
        self.bus.subscribe(HeadlessConsole(stream=sys.__stdout__, err=sys.__stderr__), steps=False)
        self.bus.emit(OutputPrinted(text="the dashboard failed; training goes on without it", stream="tuitrain"))

    # --- start and finish ----------------------------------------------------------------------

    def start(self) -> Monitor:
        """Open the run: on every rank, at the same point of the script (under a process group the
        ranks exchange rank 0's run directory here)."""
        if self._started:
            return self
        self._started = True
        place = placement()
        self.rank, self.world_size, self.owner = place.rank, place.world_size, place.owner
        if self.owner:
            self.screen = screen_for(self._dashboard)
            if self.run_dir is None:
                self.run_dir = fresh_run_dir(self._root / (self.experiment or "monitor"))
            else:  # one run per folder: a run_dir that holds a run already gets a sibling, run_dir-2 ...
                self.run_dir = claim_run_dir(self.run_dir)
        if self.world_size > 1:
            self._join_group()
        named = self._given_dir or self.run_dir  # run_dir-2 is still the run the user named
        self.experiment = self.experiment or (named.resolve().name if named else "")
        if self.owner:
            self._open_run()
        else:
            # a signal to this rank counts as a stop request for every rank (the agreement)
            self._signals = StopOnSignals(self.interrupter, sigint=True).__enter__()
            if self.screen == "dashboard" and self.run_dir is not None:
                self._quiet_rank()
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self._at_exit)
        return self

    def _join_group(self) -> None:
        """Agree from here on: a gloo group for the exchanges, and rank 0's run directory and screen
        known on every rank. Waits for a process group (torchrun before init_process_group)."""
        dist = sys.modules.get("torch.distributed")  # only when the user's code has loaded it
        if dist is None or not dist.is_initialized():
            self._group_pending = True
            return
        self._group_pending = False
        from tuitrain.core.strategies.agreement import SyncedInterrupter, control_group

        group = control_group()
        shared = [str(self.run_dir) if self.owner else "", self.screen if self.owner else ""]
        dist.broadcast_object_list(shared, src=0, group=group)
        if not self.owner:
            self.run_dir = Path(shared[0]) if shared[0] else None
            self.screen = shared[1]
        self._synced = SyncedInterrupter(self.rank, group, inbox=self.interrupter)
        self._life.flags = self._synced

    def _open_run(self) -> None:
        env = {}
        if self.world_size > 1:
            env = {"strategy": "ddp", "world_size": self.world_size}
        self._session = RunSession(self.run_dir, config=self.config, interrupter=self.interrupter,
                                   console=self.screen == "console", signals="sigint", alerts=self.alerts)
        self._session.open()
        self.bus = self._session.bus
        self._checkpointer = ckpt.Checkpointer(self.run_dir / "checkpoint", keep_last=self.keep_last, keep_best=0,
                                               keep_requested=self.keep_requested)
        self._checkpointer.prepare()
        self._life = Lifecycle(self.bus, self._flags, chores=self._flush)
        from tuitrain.core.media import MediaLog

        self._media = MediaLog(self.run_dir, self.bus.emit, keep=self.media_keep, epoch=lambda: self.epoch)
        from tuitrain.core.learner import env_info  # torch: the user's loop has imported it already

        import torch

        self.bus.emit(RunStarted(run_dir=str(self.run_dir), experiment=self.experiment, epochs=self.epochs,
                                 max_steps=self.max_steps, steps_per_epoch=0, batch_size=self.batch_size,
                                 pid=os.getpid(), env={**env_info(torch.device("cpu")), **env}, config=self.config,
                                 loop=self.loop))
        if self._given_dir is not None and self.run_dir != self._given_dir:
            self.bus.emit(OutputPrinted(text=f"{self._given_dir} holds a run already: this run goes to "
                                             f"{self.run_dir}", stream="tuitrain"))
        if self.screen == "dashboard":
            self._viewer = Viewer(self.run_dir, self.theme).open()
        elif self.screen == "notebook":  # the picture in this cell; the kernel's interrupt stops gracefully
            from tuitrain.run.notebook import NotebookView

            self._view = NotebookView(self.run_dir, self.theme).open()
        if self.screen != "none":  # prints go to experiment.log (and the screen's output panel)
            from tuitrain.core.output import capture_output

            self._capture = capture_output(self.bus.emit)
            self._capture.__enter__()
        self._thread = threading.Thread(target=self._pump, name="tuitrain-monitor", daemon=True)
        self._thread.start()

    def finish(self, error: BaseException | None = None) -> None:
        """End the run: failed when `error` is given (a KeyboardInterrupt: interrupted), interrupted when
        a stop was requested, completed otherwise. Called again: nothing."""
        if not self._started or self._finished:
            return
        self._finished = True
        sys.excepthook = self._prev_excepthook or sys.__excepthook__
        try:
            atexit.unregister(self._at_exit)
        except Exception:
            pass
        if self._synced is not None:
            self._synced.close()
        if not self.owner:
            if self._signals is not None:
                self._signals.__exit__()
            self._loud_rank()
            return
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        if self._media is not None:
            self._media.close()  # what was logged is written and said before the end
        self._flush()
        life = self._life
        try:
            capture = getattr(self, "_capture", None)
            if capture is not None:
                capture.__exit__(None, None, None)
        finally:
            self.bus.deliver()
            failure = self.bus.write_failure
            if failure is not None:  # the run directory could not be written: one line, no traceback
                last = self._checkpointer.last_complete()
                life.failed(RunDirUnwritable(*failure), epoch=self.epoch, step=self.step,
                            checkpoint=str(last or ""))
            elif error is not None and not isinstance(error, KeyboardInterrupt):
                life.failed(error, epoch=self.epoch, step=self.step)
            else:
                stopped = self._flags.stop_requested or error is not None
                life.finished("stopped" if stopped else "completed", epoch=self.epoch, step=self.step)
            self._session.close()
            if self._viewer is not None:
                self._viewer.close()
                self._viewer = None
            if self._view is not None:  # after the session: the run's last events are in its files
                self._view.close()

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the script, as the excepthook saw it (None while there is none)."""
        return self._error

    def _excepthook(self, exc_type, exc, tb) -> None:
        self._error = exc  # the script ends on it: the run is failed (see _at_exit)
        (self._prev_excepthook or sys.__excepthook__)(exc_type, exc, tb)

    def _at_exit(self) -> None:
        self.finish(self._error)

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self.finish(exc)
        return False  # an exception in the block propagates

    # --- ranks other than 0 under a dashboard: their output goes to a file, never over the screen ---

    def _quiet_rank(self) -> None:
        folder = self.run_dir / "ranks"
        folder.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._rank_fds = (os.dup(1), os.dup(2))
        raw = os.open(folder / f"rank-{self.rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(raw, 1)
        os.dup2(raw, 2)
        os.close(raw)

    def _loud_rank(self) -> None:
        if self._rank_fds is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._rank_fds):
            os.dup2(saved, fd)
            os.close(saved)
        self._rank_fds = None
