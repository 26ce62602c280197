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

The front door; its parts: monitor_pump.py (a thread of its own reads what `log` appended, off the loop's thread,
says it and judges it by the `[watch]` rules), monitor_run.py (rank 0's run: its files, the dashboard in a process
of its own, what the loop prints captured), monitor_ranks.py (across ranks).

The loop's side is two flags read at its boundary. `stop_requested` is the boundary: across ranks the agreement tick
(each rank's requests combined, an exchange about every 50 ms of the loop, read one exchange later: every rank gets
the same answer at the same call), then a pause waited out, then the answer. `checkpoint_requested` reads the last
agreed value, with no collective of its own. A stop promises a checkpoint told to the loop before the stop itself
(core/lifecycle.py `StopCheckpoint`). Across ranks rank 0 alone owns the run directory, the files and the screen;
the others' `log` is a no-op. Must not import textual."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from tuitrain.core import checkpoint as ckpt
from tuitrain.core.control import Interrupter
from tuitrain.core.health import Alerts, Health, Watch
from tuitrain.core.lifecycle import Lifecycle
from tuitrain.core.saving import Call, SavePolicy, Stop
from tuitrain.core.verdicts import UserAlerts
from tuitrain.run.directories import claim_run_dir, fresh_run_dir
from tuitrain.run.learner import screen_for
from tuitrain.run.monitor_pump import Pump
from tuitrain.run.monitor_ranks import Ranks
from tuitrain.run.monitor_run import OwnedRun
from tuitrain.run.session import placement


class Monitor:
    """A run directory, the dashboard and stop/pause/checkpoint for your own loop.

    A context manager, or `mon = Monitor(...).start()` ... `mon.finish()` for a loop at a script's top level (an
    exception that ends the script, or the interpreter exiting, finishes it as failed or as it stands). experiment:
    the run's name (default: the run folder's name); config: a dict, written to config.toml and shown by `tuitrain
    watch`; run_dir: where the run goes (default `dir/experiment/<timestamp>`; one that holds a run already:
    `run_dir-2`, `-3` ...); dashboard: "auto" (a terminal: the dashboard; a Jupyter notebook: the dashboard as a
    picture in the cell, redrawn about once a second; else the headless console lines), True (a terminal, a notebook
    or ValueError) or False (nothing printed); theme: the dashboard's theme; keep_last: checkpoints kept, of those
    not asked for; keep_requested: those asked for (saved when `checkpoint_requested` was raised, or after a stop
    was) kept, 0: all; max_steps: the steps the loop will take, if known (a progress bar and an ETA); batch_size:
    items per step, if known (items/s beside it/s); epochs: the epochs it will run, if it counts them
    (`mon.epoch = n` as each begins); watch: the `[watch]` rules for what `log` is given (spikes and non-finite
    values of `loss` and `grad_norm`, and every other rule of tuitrain/core/rules/: alerts, and "stop" sets
    `stop_requested`); alerts: the `[alerts]` table (a webhook, a command).
    """

    #: a stop (q y, Ctrl+C, SIGTERM, `tuitrain stop`, a [watch] rule's) also raises `checkpoint_requested`,
    #: once, and `stop_requested` says True one call later than it would if the loop has not been shown
    #: the request yet: a loop that checks both saves a checkpoint at the stop, whichever it checks
    #: first. The integrations turn it off: they save at a stop themselves.
    checkpoint_on_stop = True
    loop = "monitor"  #: RunStarted.loop: an integration says which framework's loop it is

    def __init__(
        self,
        experiment: str = "",
        config: dict | None = None,
        run_dir: str | os.PathLike | None = None,
        dashboard: Any = "auto",
        *,
        dir: str | os.PathLike = "runs",
        theme: str | None = None,
        keep_last: int = 3,
        max_steps: int = 0,
        batch_size: int = 0,
        epochs: int = 0,
        watch: dict | None = None,
        alerts: dict | None = None,
        keep_requested: int = 0,
        media_keep: int = 100,
    ) -> None:
        self.health = Health(Watch.of(watch))  # a bad key or action is a ValueError here, on every rank
        self.alerts = Alerts.of(alerts)
        counts = {"max_steps": max_steps, "batch_size": batch_size, "epochs": epochs}
        for name, value in {**counts, "keep_requested": keep_requested, "media_keep": media_keep}.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Monitor({name}=...) takes a whole number of 0 or more, not {value!r}")
        screen_for(dashboard)  # a bad value is an error here, on every rank
        if theme:
            from tuitrain.dashboard.themes import resolve_theme

            theme = str(resolve_theme(str(theme), Path.cwd()))  # ThemeError (a ValueError) names the themes
        self.max_steps, self.batch_size, self.epochs = max_steps, batch_size, epochs
        #: the epoch the loop is in, if it counts epochs: set it, and what `log` records carries it
        self.epoch = 0
        self._dashboard, self._root = dashboard, Path(dir)
        self._given_dir = Path(run_dir) if run_dir is not None else None
        self.run_dir: Path | None = self._given_dir
        self.experiment, self.config, self.theme = experiment, dict(config or {}), theme
        self.keep_last, self.keep_requested, self.media_keep = keep_last, keep_requested, media_keep
        self.interrupter = Interrupter()  # this rank's requests (the agreement combines them)
        self.rank, self.world_size, self.owner = 0, 1, True
        self.screen = "none"
        self.step = 0
        self.bus: Any = None  # the run's event bus, on rank 0 once started
        self._ranks = Ranks(self.interrupter)
        self._pump = Pump()
        #: the run's life (core/lifecycle.py): control said, pauses, the stop's checkpoint, the summary, the
        #: end; on every rank (those other than 0 say nothing: their pauses wait, quietly)
        self._life = Lifecycle(SimpleNamespace(emit=lambda event: None), self.interrupter)
        self._user_alerts = UserAlerts()
        self._request_by = ""  # who asked for the checkpoint request taken and not yet saved
        self._started = self._finished = False
        self._error: BaseException | None = None
        self._run: Any = None  # an OwnedRun (monitor_run.py) once started, on rank 0
        self._prev_excepthook: Any = None

    # --- the loop's side ---------------------------------------------------------------------

    @property
    def _flags(self) -> Interrupter:
        return self._ranks.synced if self._ranks.synced is not None else self.interrupter

    @property
    def stop_requested(self) -> bool:
        """`q`/`y` or Ctrl+C in the dashboard, Ctrl+C or SIGTERM here, or `tuitrain stop RUN_DIR`; or
        the run directory could not be written (a full disk): the run ends as failed. Reading it is the
        loop's boundary: across ranks the agreement tick (read it on every rank at the same points), and
        a pause waits here. A stop whose checkpoint the loop has not been told of yet is held back one
        call (`checkpoint_on_stop`)."""
        stop = self._boundary()
        self._see_stop()
        return self._life.stop_checkpoint.stop(stop)

    def _boundary(self) -> bool:
        """The loop at its boundary: the ranks' exchange, a pause waited out; whether a stop is asked for."""
        if self._ranks.pending:
            self._join_group()
        synced = self._ranks.synced
        if synced is None:
            it = self.interrupter
            if it.paused and not it.stop_requested and self.owner:  # a loop that logs rarely pauses here too
                self._wait_while_paused()
            return it.stop_requested or bool(it.failure)
        synced.pending  # noqa: B018 - the tick: an exchange now and then
        if synced.paused and not synced.stop_requested:
            self._wait_while_paused()
        return synced.stop_requested

    @property
    def checkpoint_requested(self) -> bool:
        """`c` in the dashboard or `tuitrain checkpoint RUN_DIR` (across ranks: as last agreed), or a stop
        (see `checkpoint_on_stop`); it stays True until `save_checkpoint`, `add_checkpoint` or
        `take_checkpoint_request` on this rank."""
        self._see_stop()
        return self._life.stop_checkpoint.asked() or self._flags.checkpoint_requested

    def _see_stop(self) -> None:
        """A stop seen for the first time promises its checkpoint, as the policy decides (in one process a failed
        write of the run directory promises none). Across ranks the agreed stop: seen at the same call on every rank."""
        flags, told = self._flags, self._life.stop_checkpoint
        if flags.stop_requested and not told.seen:
            failed = self._ranks.synced is None and bool(self.interrupter.failure)
            told.see(True, self._policy().decide(Stop(flags.stop_source, failed)) is not None)

    def take_checkpoint_request(self) -> bool:
        """Whether a checkpoint was requested, clearing the request (a framework's own save follows)."""
        by = self._flags.take_checkpoint_by()
        self._request_by = self._request_by or by
        return self._life.stop_checkpoint.take() or bool(by)

    def log(self, step: int, split: str = "train", **values: Any) -> None:
        """Record values (numbers or 0-d tensors) at `step`; in one process a paused run waits here
        until resumed. Ranks other than 0: nothing."""
        self.step = max(self.step, step)
        if not self.owner:
            return
        self._pump.add(step, split, values, self.epoch)
        it = self.interrupter
        if self._ranks.synced is None and it.pending and it.paused and not it.stop_requested:
            self._wait_while_paused()

    # images, texts and histograms (tuitrain/core/media.py): a copy is taken here, the encoding and the
    # files happen off the loop's thread; ranks other than 0: nothing
    def _media_log(self, what: str, step: int, name: str, value: Any) -> None:
        if self.owner and self._run is None:
            raise RuntimeError(f"Monitor.{what} before start() (use `with Monitor(...) as mon:`)")
        if self.owner:
            getattr(self._run.media, what[4:])(step, name, value)

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

    def alert(
        self, title: str, text: str = "", level: str = "warning", step: int | None = None, value: float | None = None
    ) -> None:
        """Raise an alert of your own: in the run's events and log, on the screen, and to the `[alerts]`
        webhook or command. `level`: "info" (shown, not alarming), "warning" (or "warn") or "error"; any
        other level is a warning, said once in the run's log. Never raises inside your loop for what it
        is given (a title or text not a string is str()'d, a value not a number left out). Ranks other
        than 0: nothing."""
        if not self.owner or self.bus is None:
            return
        self._pump.flush()  # the values logged before it come first
        for event in self._user_alerts.events(title, text, level, step, value, self.step, self.epoch):
            self.bus.emit(event)

    # --- checkpoints ---------------------------------------------------------------------------

    def _policy(self) -> SavePolicy:
        return SavePolicy(on_stop=self.checkpoint_on_stop)  # the integrations turn the stop's checkpoint off

    def _reason(self, reason: str | None = None) -> tuple[str, str]:
        """(reason, who asked for it) of a save of the loop's own, as the policy decides (core/saving.py)."""
        taken = self.take_checkpoint_request()
        by, self._request_by = self._request_by, ""
        flags = self._flags
        save = self._policy().decide(Call(reason or "", by, taken, flags.stop_requested, flags.stop_source))
        assert save is not None  # a save of the loop's own is always made
        return save.reason, save.requested

    def save_checkpoint(self, state: dict, step: int | None = None) -> Path:
        """Write `state` atomically into checkpoint/ (listed in its index.json, loadable with
        `torch.load(path, weights_only=True)` when it holds tensors and plain values); its path.
        Across ranks only rank 0 writes (call it on every rank, or on rank 0 alone). Made while
        `checkpoint_requested` is raised, or after a stop was asked for, it is marked requested in the
        index: `keep_last` never deletes it (`keep_requested` decides)."""
        step = self.step if step is None else step
        reason, by = self._reason()
        path = Path(self.run_dir or ".") / "checkpoint" / (ckpt.checkpoint_name(self.epoch, step) + ".pt")
        if not self.owner:
            return path
        self._run.save(state, epoch=self.epoch, step=step, reason=reason, requested=by)
        return path

    def add_checkpoint(
        self,
        path: str | os.PathLike,
        *,
        step: int,
        epoch: int | None = None,
        metrics: dict | None = None,
        retain: bool = True,
        reason: str | None = None,
    ) -> None:
        """List a checkpoint another library wrote (a file or a folder) in checkpoint/index.json, with
        its sha256 (rank 0; nothing elsewhere). One inside checkpoint/ falls under `keep_last` unless
        `retain=False`; one elsewhere is never deleted here. `reason`: "request" when one was taken, else
        "api" (or say: "stop", "end" ...); one for a request taken, or after a stop was asked for, is marked
        requested, as `save_checkpoint`'s."""
        reason, by = self._reason(reason)
        epoch = self.epoch if epoch is None else epoch
        if not self.owner:
            return
        self._run.adopt(path, epoch=epoch, step=step, metrics=metrics, reason=reason, retain=retain, requested=by)

    def _wait_while_paused(self) -> None:
        if self.owner:
            self._pump.flush()
        self._life.pause(self.epoch, self.step)

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
            self._run = OwnedRun(self)
            self._life, self.bus = self._run.life, self._run.bus
            self._run.open()
        else:
            self._ranks.other(self.rank, self.run_dir, self.screen == "dashboard")
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self._at_exit)
        return self

    def _join_group(self) -> None:
        """Agree from here on (monitor_ranks.py); waits for a process group (torchrun before
        init_process_group): joined at the next boundary once there is one."""
        agreed = self._ranks.join(self.rank, self.owner, self.run_dir, self.screen)
        if agreed is None:
            return
        if not self.owner:
            self.run_dir, self.screen = agreed
        self._life.flags = self._ranks.synced

    def finish(self, error: BaseException | None = None) -> None:
        """End the run: failed when `error` is given (a KeyboardInterrupt: interrupted), interrupted when
        a stop was requested, completed otherwise. Called again: nothing."""
        if not self._started or self._finished:
            return
        self._finished = True
        sys.excepthook = self._prev_excepthook or sys.__excepthook__
        atexit.unregister(self._at_exit)
        self._ranks.close()
        if self.owner:
            self._run.close(error, self.epoch, self.step)

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
