"""`TuitrainCallback`: Lightning's own training with tuitrain's run directory, dashboard and controls.

    from tuitrain.integrations.lightning import TuitrainCallback
    trainer = lightning.pytorch.Trainer(..., callbacks=[TuitrainCallback(experiment="mnist")])

A thin adapter over `tuitrain.Monitor`: the run opens when fit starts (on every rank, after the process
group exists), what the LightningModule logs with `self.log` goes to the run as train or valid metrics
(split by name), `tuitrain stop` sets `trainer.should_stop` at the same step on every rank, and
`tuitrain checkpoint` has the Trainer write its own `.ckpt` into the run's checkpoint/ folder. A
LightningModule logs samples with `TuitrainCallback.of(self.trainer).log_image("samples", x)` (also
`log_text`, `log_histogram`; the step defaults to the global step).

Works with `lightning.pytorch` and with `pytorch_lightning`: Lightning wants a subclass of its own
package's `Callback`, so the class an instance gets is built when it is made, on the `Callback` of each
of the two packages already imported (both, when both are). Only the user imports this module;
importing `tuitrain` never imports Lightning.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from tuitrain.core.events import MetricsLogged
from tuitrain.core.verdicts import number_of
from tuitrain.integrations.media import MediaCalls
from tuitrain.run.monitor import Monitor
from tuitrain.sources.polled import scope_suffix

__all__ = ["TuitrainCallback"]

_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_SPLITS = {
    "train": "train",
    "training": "train",
    "val": "valid",
    "valid": "valid",
    "validation": "valid",
    "eval": "valid",
}
_PREFIX = re.compile(r"^(train|training|val|valid|validation|eval)[_/](.+)$", re.IGNORECASE)
_SUFFIX = re.compile(r"^(.+)/(train|training|val|valid|validation|eval)$", re.IGNORECASE)
_LOADER = re.compile(r"^(.+)(/dataloader_idx_\d+)$")  # Lightning's name for a metric of a second val loader


@functools.lru_cache(maxsize=4096)  # the same few names every logged step
def split_name(key: str, default: str = "train") -> tuple[str, str]:
    """A logged metric's split and name: `val_loss`, `val/loss`, `loss/val` -> ("valid", "loss");
    `train_acc` -> ("train", "acc"); a name without a marker keeps `default`."""
    loader = ""
    m = _LOADER.match(key)
    if m:
        key, loader = m.group(1), m.group(2)
    m = _PREFIX.match(key)
    if m:
        return _SPLITS[m.group(1).lower()], m.group(2) + loader
    m = _SUFFIX.match(key)
    if m:
        return _SPLITS[m.group(2).lower()], m.group(1) + loader
    return default, key + loader


def _scoped(key: str) -> tuple[str, str]:
    """A logged name without Lightning's `_step`/`_epoch` suffix, and its scope ("step" or "epoch"):
    `train_loss_epoch` is the epoch's value of `train_loss`, as tuitrain reads Lightning's CSV logs."""
    m = _LOADER.match(key)
    base, loader = (m.group(1), m.group(2)) if m else (key, "")
    stem, scope = scope_suffix(base)
    return (stem + loader, scope) if scope else (key, "step")


def _forked_duplicate(key: str, keys) -> bool:
    """`x_step`/`x_epoch` beside `x`: the two forms of one `self.log(on_step=True, on_epoch=True)`."""
    for suffix in ("_step", "_epoch"):
        if key.endswith(suffix) and key[: -len(suffix)] in keys:
            return True
    return False


def _changed(now: dict, before: dict) -> dict:
    """The entries of `now` Lightning produced since `before` was taken: it hands out a new tensor
    for every value it computes, and keeps the very object of one it did not touch."""
    return {k: v for k, v in now.items() if before.get(k) is not v}


def _plain(value: Any) -> Any:
    """hparams as plain Python: nested AttributeDicts as dicts, Nones left out (TOML has no null)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value if v is not None]
    return value


def _callback_bases() -> tuple[type, ...]:
    """The `Callback` of each Lightning package the user has imported, or of the first installed."""
    loaded = [sys.modules[name] for name in _PACKAGES if name in sys.modules]
    if not loaded:
        for name in _PACKAGES:
            try:
                loaded = [importlib.import_module(name)]
                break
            except ImportError:
                continue
        else:
            raise ImportError(
                "TuitrainCallback needs Lightning: pip install 'tuitrain[lightning]' (or pytorch_lightning)"
            )
    return tuple(module.Callback for module in loaded)


_CLASSES: dict[tuple[type, ...], type] = {}


def _concrete(cls: type) -> type:
    """`cls` made a Lightning Callback of the packages imported now (one class per combination)."""
    bases = tuple(b for b in _callback_bases() if not issubclass(cls, b))
    if not bases:
        return cls
    key = (cls, *bases)
    made = _CLASSES.get(key)
    if made is None:
        made = type(
            cls.__name__, key, {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "_user_class": cls}
        )
        _CLASSES[key] = made
    return made


def _rebuild(cls: type, state: dict) -> TuitrainCallback:
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


class TuitrainCallback(MediaCalls):
    """Give a Lightning Trainer's fit tuitrain's run directory, dashboard and controls.

    experiment: the run's name (default: the LightningModule's class name in lower case); run_dir: where
    the run goes (default `dir/experiment/<timestamp>`); dashboard: "auto" (a terminal: the dashboard,
    and Lightning's progress bar is turned off; else the headless console lines), True or False;
    theme: the dashboard's theme; dir: the folder of runs; save_on_stop: a stop request (`tuitrain stop`,
    `q` in the dashboard, Ctrl+C) has the Trainer save a checkpoint before it stops.

    Train metrics are read at the steps Lightning logs at (`log_every_n_steps`), with the optimizers'
    lr; epoch-level ones (`on_epoch=True`) once each epoch's are in; valid metrics at the end of each
    validation. `x_step` and `x_epoch` are the step and epoch values of `x` (one chart, as tuitrain reads
    Lightning's CSV logs): what `self.log("train_loss", on_step=True, on_epoch=True)` gives is `loss`.
    """

    @staticmethod
    def of(trainer) -> TuitrainCallback:
        """The trainer's TuitrainCallback (from a LightningModule: `TuitrainCallback.of(self.trainer)`)."""
        for cb in getattr(trainer, "callbacks", None) or ():
            if isinstance(cb, TuitrainCallback):
                return cb
        raise LookupError("this Trainer has no TuitrainCallback: Trainer(callbacks=[TuitrainCallback()])")

    def _global_step(self) -> int:
        return int(self._trainer.global_step) if self._trainer is not None else 0

    def __new__(cls, *args: Any, **kwargs: Any) -> TuitrainCallback:
        return object.__new__(_concrete(cls))

    def __init__(
        self,
        experiment: str = "",
        run_dir: str | os.PathLike | None = None,
        dashboard: Any = "auto",
        theme: str | None = None,
        *,
        dir: str | os.PathLike = "runs",
        save_on_stop: bool = True,
        watch: dict | None = None,
        alerts: dict | None = None,
    ) -> None:
        from tuitrain.core.health import Alerts, Watch

        self.watch, self.alerts = Watch.of(watch), Alerts.of(alerts)  # the [watch] rules on what is logged
        self.save_on_stop = save_on_stop
        self.experiment = experiment
        self.run_dir = run_dir
        self.dashboard = dashboard
        self.theme = theme
        self.dir = dir
        self.monitor: Monitor | None = None
        self._trainer = None  # the Trainer of the fit under way: its global step is the media's default
        self._reset()

    def _reset(self) -> None:
        self._before: dict = {}  # callback_metrics as they were when this batch or validation began
        self._epoch_before: dict | None = None  # ... at on_train_epoch_end, read once the epoch's logs are in
        self._last_step = -1
        self._stopped = False

    def __reduce__(self):  # the class is made at runtime: pickle the user's class and rebuild (ddp_spawn)
        return _rebuild, (
            getattr(type(self), "_user_class", type(self)),
            dict(self.__dict__, monitor=None, _trainer=None),
        )

    # --- the run ------------------------------------------------------------------------------

    def on_fit_start(self, trainer, pl_module) -> None:
        self._finish(None)  # a second fit with the same callback: a run of its own
        self._reset()
        mon = Monitor(
            experiment=self.experiment or type(pl_module).__name__.lower(),
            config=self._config(trainer, pl_module),
            run_dir=self.run_dir,
            dashboard=self.dashboard,
            dir=self.dir,
            theme=self.theme,
            max_steps=self._max_steps(trainer),
            batch_size=self._batch_size(trainer),
            epochs=max(0, int(trainer.max_epochs or 0)),
            watch=self.watch,
            alerts=self.alerts,
        )
        mon.checkpoint_on_stop = False  # `_obey` saves at a stop itself (save_on_stop)
        mon.loop = "lightning"
        self._trainer = trainer
        self.monitor = mon.start()
        if mon.owner and mon.screen in ("dashboard", "notebook", "console"):
            bar = getattr(trainer, "progress_bar_callback", None)
            if bar is not None:  # the dashboard shows the progress; the bar would only fill output.log
                bar.disable()  # (in a notebook: a widget of its own under the picture, taking in the prints;
                # headless: the console's lines are the progress, and the bar, drawn for no terminal,
                # printed itself once more after the run's end lines)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._finish(exception)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self._finish(None)

    def _finish(self, error: BaseException | None) -> None:
        mon, self.monitor = self.monitor, None
        if mon is not None:
            mon.finish(error)

    def _config(self, trainer, pl_module) -> dict:
        config = _plain(dict(getattr(pl_module, "hparams", None) or {}))
        basics = {
            "max_epochs": trainer.max_epochs,
            "max_steps": trainer.max_steps,
            "accumulate_grad_batches": trainer.accumulate_grad_batches,
            "log_every_n_steps": trainer.log_every_n_steps,
            "precision": str(trainer.precision),
            "world_size": trainer.world_size,
            "strategy": type(trainer.strategy).__name__,
        }
        config.setdefault("trainer", _plain(basics))
        return config

    @staticmethod
    def _max_steps(trainer) -> int:
        try:
            steps = trainer.estimated_stepping_batches
        except Exception:  # a loader without a length, or a Lightning that cannot say
            return 0
        return int(steps) if isinstance(steps, (int, float)) and math.isfinite(steps) and steps > 0 else 0

    @staticmethod
    def _batch_size(trainer) -> int:
        """Items per optimizer step, when the train loader is one DataLoader with a batch size."""
        size = getattr(getattr(trainer, "train_dataloader", None), "batch_size", None)
        if not isinstance(size, int) or size <= 0:
            return 0
        return size * max(1, trainer.world_size) * max(1, int(trainer.accumulate_grad_batches))

    # --- metrics ---------------------------------------------------------------------------------

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # reading callback_metrics makes Lightning compute every logged value (30-55 µs): only before a
        # batch whose step Lightning logs at (a step may advance global_step by one per optimizer)
        every = trainer.log_every_n_steps
        if self.monitor is not None and every:
            step, ahead = trainer.global_step, max(1, len(trainer.optimizers))
            if (step + ahead) // every != step // every:
                self._before = dict(trainer.callback_metrics)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        mon = self.monitor
        if mon is None:
            return
        step = trainer.global_step
        every = trainer.log_every_n_steps
        if step != self._last_step and every and step % every == 0:  # a step Lightning logs at
            self._last_step = step
            now = dict(trainer.callback_metrics)
            fresh = _changed(now, self._before)
            values = self._split(fresh, now, "train", drop_forked=True)
            train = values.setdefault(("train", "step"), {})
            for i, optimizer in enumerate(trainer.optimizers):
                name = "lr" if i == 0 else f"lr_{i}"
                if name not in train and optimizer.param_groups:
                    train[name] = optimizer.param_groups[0]["lr"]
            self._log(mon, step, values)
        self._obey(trainer, mon)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # the module's own on_train_epoch_end logs after this hook: read the epoch once they are in
        if self.monitor is not None:
            self._epoch_before = dict(trainer.callback_metrics)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._log_epoch(trainer)  # the epoch before, under its own number
        if self.monitor is not None:
            self.monitor.epoch = trainer.current_epoch + 1  # tuitrain counts epochs from 1

    def on_train_end(self, trainer, pl_module) -> None:
        self._log_epoch(trainer)

    def _log_epoch(self, trainer) -> None:
        if self.monitor is None or self._epoch_before is None:
            return
        now = dict(trainer.callback_metrics)
        fresh = _changed(now, self._epoch_before)
        self._epoch_before = None
        # `x` and `x_epoch` both hold the epoch's mean of a value logged on steps too: keep `x_epoch`, the
        # epoch scope of `x`, so that it does not join the per-step series of `x`
        fresh = {
            k: v for k, v in fresh.items() if k + "_epoch" not in fresh and not (k.endswith("_step") and k[:-5] in now)
        }
        self._log(self.monitor, trainer.global_step, self._split(fresh, now, "train", drop_forked=False))

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.monitor is not None and not trainer.sanity_checking:
            self._before = dict(trainer.callback_metrics)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.monitor is None or trainer.sanity_checking:
            return
        now = dict(trainer.callback_metrics)
        # what validation logged, its own hooks included; a name without a marker is a valid metric here
        fresh = _changed(now, self._before)
        self._log(self.monitor, trainer.global_step, self._split(fresh, now, "valid", drop_forked=True))

    @staticmethod
    def _split(fresh: dict, now: dict, default: str, drop_forked: bool) -> dict[tuple[str, str], dict]:
        """The values by (split, scope)."""
        out: dict[tuple[str, str], dict] = {}
        for key, value in fresh.items():
            if drop_forked and _forked_duplicate(key, now):
                continue
            base, scope = _scoped(key)
            split, name = split_name(base, default)
            out.setdefault((split, scope), {})[name] = value
        return out

    @staticmethod
    def _log(mon: Monitor, step: int, values: dict[tuple[str, str], dict]) -> None:
        # the step values first: an epoch's value is said after what was logged at its step
        for (split, scope), metrics in sorted(values.items(), key=lambda kv: kv[0][1] == "epoch"):
            if not metrics:
                continue
            if scope == "step":
                mon.log(step, split=split, **metrics)
            elif mon.owner and mon.bus is not None:  # an epoch's value: its own series of the name's chart
                numbers = {}
                for name, value in metrics.items():
                    try:
                        numbers[name] = number_of(value)
                    except (TypeError, ValueError, RuntimeError):
                        continue  # not a number: left out, as `Monitor.log` leaves it out
                mon.step = max(mon.step, step)
                if numbers:
                    mon._pump.flush()  # the values logged before it come first (as `Monitor.alert` has them)
                    mon.bus.emit(MetricsLogged(split=split, epoch=mon.epoch, step=step, metrics=numbers, scope="epoch"))

    # --- controls --------------------------------------------------------------------------------

    def _obey(self, trainer, mon: Monitor) -> None:
        """Every rank, every step: the agreement tick first (a pause waits in it), then what was agreed.
        A stop saves a checkpoint first, as `tuitrain stop` and the dashboard's `q` promise (once: with
        `min_epochs` not reached Lightning trains on), unless the run directory cannot be written."""
        stop = mon.stop_requested
        requested = mon.checkpoint_requested and mon.take_checkpoint_request()
        # every rank must decide alike (the save is collective): a write failure is known to rank 0 alone
        broken = mon.world_size == 1 and bool(mon.interrupter.failure)
        final = stop and not self._stopped and self.save_on_stop and not broken
        if requested or final:
            self._save(trainer, mon)
        if stop:
            self._stopped = True
            trainer.should_stop = True

    @staticmethod
    def _save(trainer, mon: Monitor) -> Path:
        step, epoch = trainer.global_step, trainer.current_epoch + 1  # from 1, as tuitrain's own
        path = Path(mon.run_dir) / "checkpoint" / f"epoch-{epoch:04d}-step-{step:08d}.ckpt"
        trainer.save_checkpoint(path)  # collective under DDP: rank 0 writes
        mon.add_checkpoint(path, step=step, epoch=epoch)
        return path
