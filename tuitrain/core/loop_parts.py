"""What the loop reads (`LoopParts`, as ignite's engine reads `engine.state`), and the two helpers its
training bodies share: the `[watch]` rules in a loop (`Judge`) and a loader's wait timed (`timed`).

The Learner builds a `LoopParts` at the start of each fit (`LoopParts.of`) from its
settings and collaborators as they are then; the loop reads nothing else of it. `learner` is there
for one reason: a phase's step is given the learner (`phase.step(learner, batch)`, the user's API).
Must not import textual.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from .learner_health import TotalNorm
from .saving import SavePolicy

if TYPE_CHECKING:
    from .callbacks import EventBus
    from .control import Interrupter
    from .early_stopping import EarlyStopping
    from .ema import WeightAverage
    from .learner_checkpoint import CheckpointIO
    from .learner_health import HealthGuard
    from .lifecycle import Lifecycle
    from .media import LearnerMedia
    from .metrics import Context, MetricSet
    from .phases import Phase, PhaseLearner
    from .state import TrainState

T = TypeVar("T")
#: (autocast or None, backward, optimizer step or None): `CoreLearner.step_calls`
StepCalls = tuple[
    "Callable[[], AbstractContextManager[Any]] | None", Callable[[torch.Tensor], None], "Callable[[], Any] | None"
]


@dataclass(eq=False)
class LoopParts:
    """One fit's settings, collaborators and the learner's calls, for `Loop`."""

    # the settings (sections.Train, Log), as the learner holds them when the fit starts
    epochs: int
    max_steps: int
    grad_accumulation: int
    validate_every: int
    validate_every_n_steps: int
    log_every_n_steps: int
    #: batches go to `device` (not the CPU), `non_blocking` there (CUDA)
    move_batches: bool
    device: torch.device
    non_blocking: bool
    #: the loop may visit a step boundary on its own (one process); ranks visit them together
    solo_boundaries: bool
    saving: SavePolicy  # when to save a checkpoint (saving.py)
    # the run: its state, its events, its control flags, its life between start and finish
    state: TrainState
    bus: EventBus
    interrupter: Interrupter  # a rank's agreed one
    lifecycle: Lifecycle
    # the parts trained and measured
    train_phase: Phase
    valid_phase: Phase
    metric_sets: dict[str, MetricSet]
    optimizer: Any  # the first optimizer (the plain step's): a torch.optim.Optimizer, None when there is none
    schedulers: dict[str, Any]
    scheduler_intervals: dict[str, str]
    early_stopping: EarlyStopping | None
    ema: WeightAverage | None
    raw_model: torch.nn.Module
    guard: HealthGuard  # the [watch] rules acted on
    ckpt_io: CheckpointIO  # the checkpoint folder's finished writes
    media: LearnerMedia | None  # [log] samples and histograms
    # the learner's calls (a subclass may override them)
    learner: PhaseLearner  # what a phase's step is given (the CoreLearner)
    model: Callable[[], torch.nn.Module]  # the model the phases call now (DDP's wrapper while training)
    step_calls: Callable[[], StepCalls]
    autocast: Callable[[], AbstractContextManager[Any]]
    end_manual_step: Callable[[], None]
    optimizer_step: Callable[[], Any]
    save: Callable[[str, str], None]  # save_checkpoint(reason, requested)
    load_state_dict: Callable[[dict[str, Any]], None]  # a rollback's checkpoint loaded
    write_failed: Callable[[], None]  # raises RunDirUnwritable

    @classmethod
    def of(cls, learner: Any) -> LoopParts:
        """A `CoreLearner`'s, for one fit: its settings, collaborators and calls as they are now (`learner`
        is typed Any: learner.py imports this module, and a type import back would be an import circle)."""
        return cls(
            epochs=learner.epochs,
            max_steps=learner.max_steps,
            grad_accumulation=learner.grad_accumulation,
            validate_every=learner.validate_every,
            validate_every_n_steps=learner.validate_every_n_steps,
            log_every_n_steps=learner.log_every_n_steps,
            move_batches=learner.move_batches,
            device=learner.device,
            non_blocking=learner.non_blocking,
            solo_boundaries=learner.strategy.solo_boundaries,
            saving=SavePolicy.of(learner.checkpointer),
            state=learner.state,
            bus=learner.bus,
            interrupter=learner.interrupter,
            lifecycle=learner.lifecycle,
            train_phase=learner.train_phase,
            valid_phase=learner.valid_phase,
            metric_sets=learner.metric_sets,
            optimizer=learner.optimizer,
            schedulers=learner.schedulers,
            scheduler_intervals=learner.scheduler_intervals,
            early_stopping=learner.early_stopping,
            ema=learner.ema,
            raw_model=learner.raw_model,
            guard=learner.guard,
            ckpt_io=learner.ckpt_io,
            media=learner.media_chores,
            learner=learner,
            model=lambda: learner.model,
            step_calls=learner.step_calls,
            autocast=learner.autocast,
            end_manual_step=learner.end_manual_step,
            optimizer_step=learner.optimizer_step,
            save=learner.save_checkpoint,
            load_state_dict=learner.load_state_dict,
            write_failed=learner.write_failed,
        )


def timed(batches: Iterable[T], ctx: Context) -> Iterator[T]:
    """`batches`, adding the seconds each one kept the loop waiting to `ctx.window_wait` (no device
    sync: the clock runs while the loader produces the batch, not while the device computes)."""
    clock = time.perf_counter
    it = iter(batches)
    try:
        while True:
            t0 = clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            ctx.window_wait += clock() - t0
            yield batch
    finally:  # a loop that breaks early closes the loader's own iterator too
        close = getattr(it, "close", None)
        if close is not None:
            close()


class Judge:
    """The [watch] rules in a training loop, one copy for every loop: the batches a rollback passes over,
    the loss judged (every step where it is on the host anyway, the CPU; else on the steps that log),
    the gradients' norm judged on the steps that log (`grads`: this loop steps the optimizer itself in
    the plain form; else the optimizer step judges its own), an update not applied (`skip`)."""

    __slots__ = (
        "guard",
        "every_step",
        "logged",
        "log_every",
        "grads_every",
        "norm_of",
        "passed_over",
        "epoch",
        "skip",
    )

    def __init__(self, parts: LoopParts, state: TrainState, grads: bool) -> None:
        guard = self.guard = parts.guard
        self.every_step, self.logged = guard.check_every_step, guard.judge_logged_loss
        self.log_every = parts.log_every_n_steps
        self.grads_every = guard.judge_grads_every if grads else 0
        # bound once, as the step is
        self.norm_of = TotalNorm(parts.raw_model.parameters()) if self.grads_every else None
        self.passed_over = {tuple(b) for b in state.skip_batches} or None
        self.epoch = state.epoch
        self.skip = guard.skip_update

    def passes_over(self, i: int) -> bool:
        """Batch `i` is one a rollback passes over."""
        return self.passed_over is not None and (self.epoch, i) in self.passed_over

    def loss(self, loss: torch.Tensor, state: TrainState, i: int) -> tuple[torch.Tensor | float, bool]:
        """(the loss as added to the metrics, bad): a float where it was read back to be judged, else the
        tensor itself (no sync); bad: its update is not to be applied."""
        if self.every_step:
            v = loss.item()
            return v, self.guard.judge_loss(v, state, i)
        if self.logged and (state.step + 1) % self.log_every == 0:
            v = loss.item()
            return v, self.guard.judge_loss(v, state, i)
        return loss, False

    def grads(self, state: TrainState, batches: list[int]) -> bool:
        """The gradients of the step about to be taken judged bad (on the steps that log)."""
        return bool(
            self.norm_of is not None  # bound where grads_every is set
            and (state.step + 1) % self.grads_every == 0
            and self.guard.judge_grads(self.norm_of, state, batches)
        )
