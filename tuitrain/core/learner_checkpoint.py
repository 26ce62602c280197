"""The Learner's checkpoint side: the state an exact resume needs, saving it through the
Checkpointer (the loop waits only for the copy to CPU), loading it back, model.pt, the final checkpoint.

`CheckpointIO` is a collaborator the Learner owns (`learner.ckpt_io`), kept apart because it is one
idea: what a checkpoint holds. It is given the parts of the run it saves when it is built; the Learner
adds its strategy's part (`Strategy.extra_state`, `save_checkpoint`, `after_load`, `save_model`).
`checkpointer` (checkpoint.py) writes and lists the files. Must not import textual.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from . import checkpoint as ckpt
from . import schedules
from .data import rng_state, set_rng_state
from .events import CheckpointStarted
from .fsutil import atomic_write, write_fault
from .state import RunDirUnwritable, TrainState

if TYPE_CHECKING:
    from .callbacks import EventBus
    from .checkpoint import Checkpointer
    from .data import ResumableLoader
    from .early_stopping import EarlyStopping
    from .ema import WeightAverage
    from .health import Health
    from .metrics import MetricSet


class Scaling(Protocol):
    """The run's gradient scaler and its per-step record, as the checkpoint and health sides read them: an
    `optimization.Precision` (which imports the health side, which imports this module)."""

    scaler: torch.amp.GradScaler | None
    unscaled: bool


class CheckpointIO:
    """What a checkpoint of this run holds, and its writes through `checkpointer` (None: no checkpoints)."""

    def __init__(
        self,
        *,
        checkpointer: Checkpointer | None,
        bus: EventBus,
        state: TrainState,
        model: torch.nn.Module,
        ema: WeightAverage | None,
        optimizers: dict[str, torch.optim.Optimizer],
        schedulers: dict[str, Any],
        precision: Scaling,
        metric_sets: dict[str, MetricSet],
        early_stopping: EarlyStopping | None,
        health: Health,
        config: dict[str, Any],
        world_size: int,
        model_path: Path | None = None,
    ) -> None:
        self.checkpointer, self.bus, self.state = checkpointer, bus, state
        self.model, self.ema, self.optimizers, self.schedulers = model, ema, optimizers, schedulers
        self.precision, self.metric_sets = precision, metric_sets
        self.early_stopping, self.health = early_stopping, health
        self.config, self.world_size, self.model_path = config, world_size, model_path
        #: the training loader (`follow`): its position in the data, mid-epoch
        self.loader: ResumableLoader | None = None
        self.resume_data: Any = None  # that position, as loaded, until the loader is followed
        self._last: tuple[int, int, str] | int | None = -1  # (epoch, step, stage) of the state last saved
        self._last_snapshot: Any = None  # the last checkpoint's CPU copy: the next one copies into it
        self.stretched: list[schedules.Stretch] = []  # the schedule lengths the last load changed

    def follow(self, loader: ResumableLoader) -> None:
        """Save `loader`'s position from now on; it takes up the position loaded last, if any."""
        self.loader = loader
        if self.resume_data is not None:
            loader.restore(self.resume_data)
            self.resume_data = None

    def saved_now(self) -> bool:
        """This exact state is already on disk (or being written)."""
        s = self.state
        return self._last == (s.epoch, s.step, s.stage)

    def mark_saved(self) -> None:
        """This state counts as saved (a rank that joined a checkpoint another rank writes)."""
        s = self.state
        self._last = (s.epoch, s.step, s.stage)

    def forget_last(self) -> None:
        """The state from here on is new (a rollback): the next save writes even at a step saved before."""
        self._last = None

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume of one process needs (live references; `snapshot` copies it)."""
        s = self.state
        in_valid = s.stage == "valid"
        scaler = self.precision.scaler
        return {
            "format": ckpt.FORMAT,
            "version": ckpt.VERSION,
            "model": self.ema.model_state() if self.ema is not None else self.model.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "optimizers": [o.state_dict() for o in self.optimizers.values()],
            "optimizer_names": list(self.optimizers),
            "schedulers": [sch.state_dict() for sch in self.schedulers.values()],
            "scheduler_names": list(self.schedulers),
            "scaler": scaler.state_dict() if scaler is not None else None,
            # mid-validation, the RNG as it was when validation began: a resume re-runs validation
            "rng": s.valid_rng if in_valid and s.valid_rng is not None else rng_state(),
            "epoch": s.epoch,
            "step": s.step,
            "batch": s.batch,
            "stage": s.stage,
            "metrics": {k: v.state_dict() for k, v in self.metric_sets.items()},
            "history": s.history,
            "epoch_metrics": s.epoch_metrics,
            "early_stopping": self.early_stopping.state_dict() if self.early_stopping else None,
            "config": self.config,
            "time_used": s.training_time(),  # seconds of training so far: max_time counts on after a resume
            # the health rules' statistics and the batches a rollback passes over: judged alike after a resume
            "health": self.health.state_dict(),
            "skip_batches": [list(b) for b in s.skip_batches],
            # streaming data's own position, mid-epoch (a stateful loader or iterable dataset)
            "data": self.loader.state_dict() if self.loader is not None and s.stage == "train" and s.batch else None,
        }

    def save(self, reason: str, state_dict: Callable[[], dict[str, Any]]) -> None:
        """Write this state (`state_dict()`: the whole of it, the strategy's part included) through the
        checkpointer: the loop waits only for the copy to CPU."""
        s = self.state
        assert self.checkpointer is not None  # saves are asked for only where there are checkpoints
        self.bus.emit(CheckpointStarted(epoch=s.epoch, step=s.step, reason=reason))
        t0 = time.perf_counter()
        self.checkpointer.wait()  # the last write is done with its snapshot: this one copies into it
        snap = ckpt.snapshot(state_dict(), self._last_snapshot)
        self._last_snapshot = snap if self.checkpointer.background else None
        stall = time.perf_counter() - t0
        self.checkpointer.save(snap, epoch=s.epoch, step=s.step, metrics=self.metrics(), reason=reason, stall=stall)
        self.mark_saved()
        if not self.checkpointer.background:
            self.flush_events()

    def metrics(self) -> dict[str, Any]:
        """The metrics an index row holds: the epoch's at its end, else the last logged training values."""
        s = self.state
        if s.stage == "done":
            return dict(s.epoch_metrics)
        out = {f"train/{k}": v for k, v in s.last_logged.items()}
        if s.valid_at == s.step:  # validated at this step: "best" can follow it
            out.update({k: v for k, v in s.epoch_metrics.items() if k.startswith("valid/")})
        return out

    def flush_events(self) -> None:
        """The checkpointer's finished writes, as events on the bus."""
        if self.checkpointer is not None:
            for e in self.checkpointer.take_events():
                self.bus.emit(e)

    def load_state_dict(self, data: dict[str, Any]) -> None:
        """One process's state back from `data` (a sharded checkpoint's shards resharded to this run)."""
        if data.get("sharded_dir"):  # a sharded (fsdp) checkpoint: DCP reshards to this run's layout
            from .strategies.sharded import load_shards

            load_shards(self.model, self.optimizers, data["sharded_dir"])
        else:  # one line that names what differs, not torch's list of every size mismatch
            why = self.mismatch(data)
            if why is not None:
                raise ValueError(f"the checkpoint does not fit this run: {why}")
            self.model.load_state_dict(data["model"])
            self._load_named("optimizer", self.optimizers, data)
        # the schedules' lengths are this run's (a resume with more epochs stretches them), not the file's
        built = {name: schedules.lengths(sch) for name, sch in self.schedulers.items()}
        self._load_named("scheduler", self.schedulers, data)
        self.stretched = [
            s for name, sch in self.schedulers.items() for s in schedules.keep_lengths(name, sch, built[name])
        ]
        if self.ema is not None and data.get("ema"):
            self.ema.load_state_dict(data["ema"])
        scaler = self.precision.scaler
        if scaler is not None and data.get("scaler"):
            scaler.load_state_dict(data["scaler"])
        for k, ms in self.metric_sets.items():
            if k in data["metrics"]:
                ms.load_state_dict(data["metrics"][k])
        if self.early_stopping is not None and data.get("early_stopping"):
            self.early_stopping.load_state_dict(data["early_stopping"])
        s = self.state
        s.epoch, s.step, s.batch, s.stage = data["epoch"], data["step"], data["batch"], data["stage"]
        s.history = {k: [list(r) for r in v] for k, v in data["history"].items()}
        s.epoch_metrics = dict(data["epoch_metrics"])
        s.time_used = float(data.get("time_used", 0.0) or 0.0)
        s.skip_batches = [list(b) for b in data.get("skip_batches") or []]
        self.health.load_state_dict(data.get("health"))
        self.resume_data = data.get("data")
        set_rng_state(data["rng"])
        # the restored optimizer has stepped: no "scheduler.step() before optimizer.step()" warning
        for opt in self.optimizers.values():
            opt._opt_called = True  # type: ignore[attr-defined]  # torch's private flag, not in its stubs
        saved_world = int(data.get("world_size", 1))
        if saved_world != self.world_size and s.stage == "train" and s.batch:
            # the position in the data order is per rank: another world size restarts at an epoch
            warnings.warn(
                f"the checkpoint was written by {saved_world} process(es) and this run has "
                f"{self.world_size}: resuming at the start of epoch {s.epoch + 1} (the rest of "
                f"epoch {s.epoch} is skipped)",
                stacklevel=3,
            )
            s.epoch, s.batch, s.stage = s.epoch + 1, 0, "train"
        self.mark_saved()

    def mismatch(self, data: Mapping[str, Any], here: str = "this run's") -> str | None:
        """What keeps `data` (a checkpoint of one file) from loading into this run's model and optimizers, in
        a few words (`here`: how they are named); None when it fits, or when `data` is of a shape not foreseen
        here (loading it says what is wrong)."""
        try:
            mine = self.model.state_dict()
            return state_mismatch(data["model"], mine, here) or optimizers_mismatch(data, self.optimizers, here)
        except (KeyError, TypeError, AttributeError):
            return None

    @staticmethod
    def _load_named(kind: str, mine: Mapping[str, Any], data: dict[str, Any]) -> None:
        """Optimizers or schedulers from `data`, matched by name (older files: by position)."""
        saved = data[kind + "s"]
        names = data.get(kind + "_names") or list(mine)[: len(saved)]
        by_name = dict(zip(names, saved))
        for name, obj in mine.items():
            if name not in by_name:
                if kind == "scheduler" and not saved:
                    continue  # a scheduler added since: it starts fresh, as before
                raise ValueError(f"the checkpoint has no {kind} {name!r} (it has: {', '.join(names) or 'none'})")
            obj.load_state_dict(by_name[name])

    def save_model(self) -> None:
        """The final model.pt: the plain state_dict (the averaged weights with EMA)."""
        if self.model_path is None:
            return
        try:
            if self.ema is not None:  # model.pt holds the averaged weights
                with self.ema.swapped_in():
                    atomic_write(self.model_path, lambda f: torch.save(self.model.state_dict(), f))
            else:
                atomic_write(self.model_path, lambda f: torch.save(self.model.state_dict(), f))
        except OSError as e:
            raise RunDirUnwritable(write_fault(e, self.model_path)) from e

    def final(self, reason: str, save: Callable[[], None]) -> None:
        """The final checkpoint (`save()`), its write finished, or the run fails with what kept it from the disk."""
        try:
            save()
            if self.checkpointer is not None:
                self.checkpointer.wait()
                if self.checkpointer.last_error and reason in ("end", "stop"):
                    e = self.checkpointer.last_exception
                    if isinstance(e, OSError):  # a full disk, a read-only folder: said in one line
                        s = self.state
                        path = self.checkpointer.folder / (ckpt.checkpoint_name(s.epoch, s.step) + ".pt")
                        raise RunDirUnwritable("the final checkpoint: " + write_fault(e, path))
                    raise RuntimeError(f"the final checkpoint could not be written: {self.checkpointer.last_error}")
        finally:
            self.flush_events()

    def finish(self) -> None:
        """The writes under way finished, their events out."""
        if self.checkpointer is not None:
            self.checkpointer.wait()
            self.flush_events()

    def best(self) -> dict[str, Any]:
        if self.checkpointer is None:
            return {}
        b = self.checkpointer.best()
        if b is None:
            return {}
        return {
            "file": f"checkpoint/{b.file}",
            "monitor": self.checkpointer.monitor,
            "value": b.metrics.get(self.checkpointer.monitor),
            "epoch": b.epoch,
            "step": b.step,
        }


def _shape(value: Any) -> str:
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def state_mismatch(saved: Mapping[str, Any], mine: Mapping[str, Any], here: str = "this run's") -> str | None:
    """The first of `mine`'s entries that `saved` lacks or holds in another shape, or the first `saved` holds
    that `mine` lacks, as `load_state_dict(strict=True)` refuses them; None when they fit. A lazy module's
    parameters are not compared: loading fills them."""
    from torch.nn.parameter import is_lazy

    differ = [
        k
        for k, v in mine.items()
        if k in saved and isinstance(v, torch.Tensor) and isinstance(saved[k], torch.Tensor) and not is_lazy(v)
        if v.shape != saved[k].shape
    ]
    missing = [k for k in mine if k not in saved]
    unexpected = [k for k in saved if k not in mine]
    more = len(differ) + len(missing) + len(unexpected) - 1
    tail = f" (and {more} more parameter{'s' if more > 1 else ''} differ)" if more > 0 else ""
    if differ:
        k = differ[0]
        return f"{k} is {_shape(saved[k])} in the checkpoint and {_shape(mine[k])} in {here} model{tail}"
    if missing:
        return f"{here} model has {missing[0]}, the checkpoint has not{tail}"
    if unexpected:
        return f"the checkpoint has {unexpected[0]}, {here} model has not{tail}"
    return None


def optimizers_mismatch(
    data: Mapping[str, Any], optimizers: Mapping[str, torch.optim.Optimizer], here: str = "this run's"
) -> str | None:
    """The first of `optimizers` that the checkpoint `data` lacks or holds with other parameter groups (their
    number, or the parameters in one), as `Optimizer.load_state_dict` refuses it; None when they fit. Matched
    by name (older files: by position), as `CheckpointIO` loads them."""
    saved = data.get("optimizers") or []
    names = data.get("optimizer_names") or list(optimizers)[: len(saved)]
    by_name = dict(zip(names, saved))
    for name, opt in optimizers.items():
        if name not in by_name:
            return f"the checkpoint has no optimizer {name!r} (it has: {', '.join(names) or 'none'})"
        there = [len(g["params"]) for g in by_name[name]["param_groups"]]
        mine = [len(g["params"]) for g in opt.param_groups]
        what = "optimizer" if name == "model" else f"optimizer {name!r}"
        if len(mine) != len(there):
            plural = "s" if len(there) != 1 else ""
            return f"its {what} has {len(there)} parameter group{plural}, {here} has {len(mine)}"
        for i, (a, b) in enumerate(zip(there, mine)):
            if a != b:
                return f"parameter group {i} of its {what} holds {a} parameters, {here} holds {b}"
    return None
