"""A run's state and outcome, and the typed exceptions that cancel parts of it.

`TrainState` (where training is: callbacks get it as their second argument), `StepOutput` (what a
step returns), `FitResult` (what `fit` returns), the exit codes, and the exceptions a step or the loop
raises: `CancelStep`, `CancelEpoch`, `CancelFitting`, `NonFiniteLoss`, `RunDirUnwritable`. A module of
its own so that the loop, the phases and the checkpoint side all import it without importing each
other. Must not import textual.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .rules.base import Verdict

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass
class TrainState:
    """Where training is; callbacks receive it as their second argument."""

    epoch: int = 1
    epochs: int = 1
    step: int = 0  # optimizer steps done (global)
    batch: int = 0  # training batches consumed in this epoch
    stage: str = "train"  # where the epoch is: "train", "valid" or "done"
    phase: str = ""
    last: Any = None  # the last step's StepOutput
    history: dict[str, list[list[float]]] = field(default_factory=dict)  # "train/loss" -> [[epoch, value], ...]
    epoch_metrics: dict[str, Any] = field(default_factory=dict)  # this epoch's "split/name" -> value
    last_logged: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""
    time_used: float = 0.0  # seconds of training in earlier sessions of this run (resumes)
    #: [epoch, batch] of the training batches passed over after a rollback (see tuitrain.core.health)
    skip_batches: list[list[int]] = field(default_factory=list)
    valid_at: int = field(default=-1, repr=False, compare=False)  # the step of the last validation
    #: the RNG state when this epoch's validation began (a checkpoint in it holds that)
    valid_rng: Any = field(default=None, repr=False, compare=False)
    #: time.monotonic() when this session's training began (None: not yet)
    session_start: Any = field(default=None, repr=False, compare=False)

    def training_time(self) -> float:
        """Seconds of training so far, earlier sessions of this run included."""
        t0 = self.session_start
        return self.time_used + (time.monotonic() - t0 if t0 is not None else 0.0)


@dataclass
class FitResult:
    model: Any  # the trained torch.nn.Module
    status: str  # "completed", "interrupted", "failed"
    exit_code: int
    reason: str
    summary: dict[str, Any]
    best: dict[str, Any]
    error: str = ""


class RunDirUnwritable(Exception):
    """A write of the run directory failed (a full disk, a quota, an I/O error, a read-only folder):
    the run ends as failed, with this one line, at the next step boundary."""

    def __init__(self, line: str, traceback_text: str = "") -> None:
        super().__init__(line)
        self.line, self.traceback_text = line, traceback_text


class CancelStep(Exception):
    """Skip the rest of this step (no optimizer step, no metrics)."""


class CancelEpoch(Exception):
    """End this phase's epoch now."""


class CancelFitting(Exception):
    """End training now; `reason` says why ("stopped", "max_steps", ...)."""

    def __init__(self, reason: str = "stopped") -> None:
        super().__init__(reason)
        self.reason = reason


class NonFiniteLoss(Exception):
    def __init__(self, value: float, epoch: int, step: int, what: str = "loss") -> None:
        said = f"loss is {value}" if what == "loss" else f"the gradients' norm is {value}"
        super().__init__(f"{said} at step {step} (epoch {epoch}); training stopped")
        self.value, self.epoch, self.step = value, epoch, step


class RollBack(Exception):
    """A health rule's rollback: the loop goes back to the newest sound checkpoint before `step`,
    passing over the batch at (`epoch`, `batch`) from then on."""

    def __init__(self, verdict: Verdict, epoch: int, batch: list[int], step: int) -> None:
        super().__init__(verdict.title)
        self.verdict, self.epoch, self.batch, self.step = verdict, epoch, batch, step


class HealthFailure(Exception):
    """A health rule ended the run as failed (a rollback with no checkpoint to go back to, or past
    `max_rollbacks`): the message is the whole story."""


@dataclass
class StepOutput:
    """What a step returns: the loss and, for metrics such as accuracy, the output and the target."""

    loss: Any = None
    output: Any = None
    target: Any = None
    items: int = 0  # batch size used to weight averages; found from target/output when 0
    value: float | None = None  # the loss as a float, when the loop has read it anyway (CPU)
    extras: dict[str, Any] | None = None  # other named values (a GAN's "g_loss"), logged when a metric names them

    @classmethod
    def of(cls, value: Any) -> StepOutput:
        if isinstance(value, StepOutput):
            return value
        if isinstance(value, torch.Tensor):
            return cls(loss=value)
        if isinstance(value, dict):
            if "loss" not in value:
                raise ValueError("a train_step/valid_step dict must have a 'loss' entry")
            extras = {k: v for k, v in value.items() if k not in _STEP_KEYS}
            return cls(
                loss=value["loss"],
                output=value.get("output"),
                target=value.get("target"),
                items=int(value.get("items", 0) or 0),
                extras=extras or None,
            )
        if hasattr(value, "loss"):
            return cls(
                loss=value.loss,
                output=getattr(value, "output", None),
                target=getattr(value, "target", None),
                items=int(getattr(value, "items", 0) or 0),
            )
        raise TypeError(
            f"a step must return a loss tensor, a dict with 'loss' or an object with .loss, got {type(value).__name__}"
        )


_STEP_KEYS = ("loss", "output", "target", "items")
