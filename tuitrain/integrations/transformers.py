"""`TuitrainCallback`: tuitrain's run directory, dashboard and controls for a Hugging Face `Trainer`.

    from tuitrain.integrations.transformers import TuitrainCallback
    trainer = transformers.Trainer(..., callbacks=[TuitrainCallback()])

A thin adapter over `tuitrain.Monitor`: the Trainer's logs become metrics (split into train and valid
by name), `tuitrain stop` sets `control.should_training_stop`, `tuitrain checkpoint` sets
`control.should_save` and every checkpoint folder the Trainer writes is listed in
checkpoint/index.json. Only the user imports this module; nothing else in tuitrain imports transformers.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler, ProgressCallback
from transformers.utils import logging as hf_logging
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from tuitrain.integrations.media import MediaCalls
from tuitrain.run.monitor import Monitor

__all__ = ["TuitrainCallback", "split_metrics"]

_VALID_PREFIXES = ("eval_", "valid_", "val_")
_SPLITS = {"train": "train", "eval": "valid", "valid": "valid", "val": "valid"}
_RENAMES = {"learning_rate": "lr"}
# the Trainer's bookkeeping: the dashboard shows it/s and items/s itself, and the epoch is no curve
_BOOKKEEPING_SUFFIXES = ("runtime", "samples_per_second", "steps_per_second", "model_preparation_time")
_BOOKKEEPING = {"epoch", "total_flos"}


def split_metrics(logs: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(train, valid) metrics from one of the Trainer's log dicts: `eval_loss` and `val/loss` are valid
    `loss`, `train_loss` and `loss` are train `loss`, `learning_rate` is `lr`. Left out: what is not a
    number, the timing and flops bookkeeping, `epoch`, and the mean `train_loss` of the end-of-training
    summary (it would read as the last step's loss)."""
    summary = "train_runtime" in logs
    train: dict[str, float] = {}
    valid: dict[str, float] = {}
    for key, value in logs.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = _scalar(value)
            if value is None:
                continue
        split, name = _split_name(key)
        if (
            name in _BOOKKEEPING
            or name.endswith(_BOOKKEEPING_SUFFIXES)
            or key in _BOOKKEEPING
            or (summary and key == "train_loss")
        ):
            continue
        name = _RENAMES.get(name, name)
        (valid if split == "valid" else train)[name] = float(value)
    return train, valid


def _split_name(key: str) -> tuple[str, str]:
    if "/" in key:  # "val/loss" or "loss/val"
        head, _, tail = key.partition("/")
        if head in _SPLITS and tail:
            return _SPLITS[head], tail
        head, _, tail = key.rpartition("/")
        if tail in _SPLITS and head:
            return _SPLITS[tail], head
        return "train", key
    for prefix in _VALID_PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            return "valid", key[len(prefix) :]
    if key.startswith("train_") and len(key) > len("train_"):
        return "train", key[len("train_") :]
    return "train", key


def _scalar(value: Any) -> float | None:
    """A 0-d tensor or numpy scalar as a float; None for anything else."""
    item = getattr(value, "item", None)
    if item is None or getattr(value, "ndim", 0) != 0:
        return None
    try:
        value = item()
    except (TypeError, ValueError, RuntimeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """The values a config file holds as they are: numbers, strings, booleans and lists of them."""
    simple = (bool, int, float, str)
    out = {}
    for key, value in values.items():
        if isinstance(value, simple):
            out[key] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, simple) for v in value):
            out[key] = list(value)
    return out


class TuitrainCallback(MediaCalls, TrainerCallback):
    """The run directory, the dashboard and stop/pause/checkpoint for `transformers.Trainer`.

    experiment: the run's name (default: `args.run_name`, else the model's class name); run_dir: where
    the run goes (default `dir/experiment/<timestamp>`); dashboard: "auto", True or False, as for
    `Monitor`; theme: the dashboard's theme. Each `trainer.train()` is one run; `monitor` is the
    latest run's `Monitor` (its `run_dir` names the folder). `log_text`, `log_image`, `log_histogram`
    (name, value, step=None: the Trainer's global step) log samples from a callback of one's own.
    """

    def __init__(
        self,
        experiment: str = "",
        run_dir: str | os.PathLike | None = None,
        dashboard: Any = "auto",
        theme: str | None = None,
        *,
        dir: str | os.PathLike = "runs",
        watch: dict | None = None,
        alerts: dict | None = None,
    ) -> None:
        from tuitrain.core.health import Alerts, Watch

        self.watch, self.alerts = Watch.of(watch), Alerts.of(alerts)  # the [watch] rules on what is logged
        if dashboard not in ("auto", True, False) or not isinstance(dashboard, (str, bool)):
            raise ValueError(f'dashboard must be "auto", True or False, not {dashboard!r}')
        self.experiment, self.run_dir, self.dashboard, self.theme, self.dir = experiment, run_dir, dashboard, theme, dir
        self.monitor: Monitor | None = None
        self._active = False
        self._state = None  # the TrainerState of the run under way: its global step is the media's default

    def _global_step(self) -> int:
        return int(getattr(self._state, "global_step", 0) or 0)

    # --- the run -----------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._end_unfinished()  # the last train() raised and the script went on: that run failed
        self._state = state
        world = max(1, int(getattr(args, "world_size", 1) or 1))
        per_device = int(getattr(state, "train_batch_size", 0) or args.per_device_train_batch_size)
        self.monitor = Monitor(
            experiment=self._experiment(args, model),
            config=self._config(args, model),
            run_dir=self.run_dir,
            dashboard=self.dashboard,
            dir=self.dir,
            theme=self.theme,
            max_steps=max(0, int(state.max_steps or 0)),
            batch_size=per_device * args.gradient_accumulation_steps * world,
            epochs=max(0, math.ceil(getattr(state, "num_train_epochs", 0) or 0)),
            watch=self.watch,
            alerts=self.alerts,
        )
        self.monitor.checkpoint_on_stop = False  # a stop has the Trainer save, as its save_strategy says
        self.monitor.loop = "transformers"
        self.monitor.start()
        self._active = True
        atexit.register(self._end_unfinished)  # after start(): it runs before the Monitor's own
        if self.monitor.screen in ("dashboard", "console", "notebook"):
            _silence_progress_bar()
        self._bars_were_on = False
        if self.monitor.screen in ("dashboard", "notebook") and hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()  # a save's "Writing model shards" bar: a widget in a notebook each
            self._bars_were_on = True

    def on_train_end(self, args, state, control, **kwargs):
        if self._active:
            self._active = False
            atexit.unregister(self._end_unfinished)
            self._bars_back()
            self._at_global_step(state)
            self.monitor.finish()

    def _bars_back(self) -> None:
        if getattr(self, "_bars_were_on", False):
            self._bars_were_on = False
            hf_logging.enable_progress_bar()

    def _at_global_step(self, state) -> None:
        """The run ends at the Trainer's global step: the steps after its last log (every `logging_steps`)
        were trained all the same, and a stop ends the loop between two logs."""
        step = int(getattr(state, "global_step", 0) or 0)
        self.monitor.step = max(self.monitor.step, step)

    def _end_unfinished(self) -> None:
        """A train() that never reached on_train_end was ended by an exception; the Monitor alone, at
        exit, could not tell that from a loop that finished (one caught in a notebook, say)."""
        if not self._active:
            return
        self._active = False
        atexit.unregister(self._end_unfinished)
        self._bars_back()
        self._at_global_step(self._state)
        # the exception itself when it ended the script (the Monitor's excepthook keeps it)
        error = self.monitor.error or RuntimeError("trainer.train() ended by an exception")
        self.monitor.finish(error)

    # --- metrics -----------------------------------------------------------------------------------

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._active or not logs:
            return
        train, valid = split_metrics(logs)
        self.monitor.epoch = _epoch(state)
        if train:
            self.monitor.log(state.global_step, **train)
        if valid:
            self.monitor.log(state.global_step, split="valid", **valid)

    # --- controls ----------------------------------------------------------------------------------

    def on_step_end(self, args, state, control, **kwargs):
        if not self._active:
            return
        mon = self.monitor
        if mon.stop_requested:  # every rank, every step: the agreement tick
            control.should_training_stop = True
            if args.save_strategy != "no":  # a Trainer that keeps checkpoints keeps the one it stops at
                control.should_save = True
        if mon.checkpoint_requested and mon.take_checkpoint_request():
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        if not self._active:
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if self.monitor.owner and not os.path.isdir(folder):
            return  # saved elsewhere (a hyperparameter search's trial folder): nothing to list
        self.monitor.add_checkpoint(folder, step=state.global_step, epoch=_epoch(state), retain=False)

    # --- helpers -----------------------------------------------------------------------------------

    def _experiment(self, args, model) -> str:
        name = self.experiment or getattr(args, "run_name", None) or (type(model).__name__ if model is not None else "")
        return str(name).replace("/", "-").replace(os.sep, "-")

    @staticmethod
    def _config(args, model) -> dict[str, Any]:
        config: dict[str, Any] = {"trainer": _plain(args.to_dict())}
        if model is not None:
            config["model"] = {"class": type(model).__name__}
            model_config = getattr(model, "config", None)
            if model_config is not None and hasattr(model_config, "to_diff_dict"):
                config["model"].update(_plain(model_config.to_diff_dict()))
        return config


def _epoch(state) -> int:
    """The Trainer's epoch counts fractions (1.5); tuitrain's is the one under way, from 1."""
    return max(1, math.ceil(state.epoch)) if state.epoch else 0


class _SilencedProgress(TrainerCallback):
    """Stands in for the Trainer's tqdm progress callback during a run with a tuitrain screen, and puts
    it back when the run ends."""

    def __init__(self, handler: CallbackHandler, original: ProgressCallback) -> None:
        self.handler, self.original = handler, original

    def restore(self) -> None:
        callbacks = self.handler.callbacks
        if self in callbacks:
            callbacks[callbacks.index(self)] = self.original  # in place: the handler may be iterating

    def on_train_end(self, args, state, control, **kwargs):
        self.restore()


def _silence_progress_bar() -> None:
    """Take the Trainer's tqdm bar off the screen while tuitrain draws the progress: the bar would go
    into the output capture as one ever-growing line. The hooks are not given the Trainer, so its
    CallbackHandler is found up the stack (the frame of `call_event`); nothing is done when it is not."""
    frame = sys._getframe(1)
    while frame is not None and not isinstance(frame.f_locals.get("self"), CallbackHandler):
        frame = frame.f_back
    if frame is None:
        return
    handler = frame.f_locals["self"]
    bars: tuple[type, ...] = (ProgressCallback,)
    if "transformers.utils.notebook" in sys.modules:  # a notebook's Trainer: an HTML table for a bar
        bars += (sys.modules["transformers.utils.notebook"].NotebookProgressCallback,)
    for i, cb in enumerate(handler.callbacks):
        if isinstance(cb, _SilencedProgress):
            cb = handler.callbacks[i] = cb.original  # left behind by a train() that raised
        if isinstance(cb, bars):
            if getattr(cb, "training_bar", None) is not None:  # it ran before this callback and opened its bar already
                cb.training_bar.leave = False  # closed without leaving a last line behind
                cb.training_bar.close()
                cb.training_bar = None
            handler.callbacks[i] = _SilencedProgress(handler, cb)  # in place: call_event is iterating
