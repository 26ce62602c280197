"""When to save a checkpoint, decided in one place: a moment of the run and the settings in, a `Save` (its
reason and who asked for it) or None out. Pure: it never touches a file, a flag or the state; the loop,
the Learner and Monitor call it and do what it says (checkpoint.py writes, retention.py decides which
files are kept, as burn-train's checkpointing strategies sit beside its file checkpointer).

The moments:
  StepDone   an optimizer step done: a step checkpoint falls due every `every_n_steps` (saved at the boundary)
  Boundary   a step boundary with a save due: saved now, unless it is held (a validation under way, or the
             epoch's last batch, whose epoch end saves that state once)
  EpochEnd   an epoch ended: every `every_n_epochs`, or the step save still due; none at the run's last
             epoch (the final save follows)
  Request    someone asked (the dashboard's c, `tuitrain checkpoint`, the API): saved, marked theirs
  Stop       a stop seen by a loop of the user's own (Monitor): the checkpoint it promises (`on_stop`)
  End        the run ended: the final save; "stop" for a stop, a preemption or a pruned trial, marked the
             person's when one asked for the stop; "end" otherwise (epochs, max_steps, early stopping, max_time)
  Call       a save the user's own loop makes (Monitor.save_checkpoint): its reason and who asked for it
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .control import PREEMPTED, PRUNED, stop_asked_for

if TYPE_CHECKING:
    from .checkpoint import Checkpointer

#: why a run ended that makes its final checkpoint a "stop" one, not the run's "end"
STOPPED = ("stopped", PREEMPTED, PRUNED)
#: why a run ended with no final checkpoint: a second Ctrl+C (leave now), an error in user code
NO_FINAL = ("killed", "failed")


@dataclass(frozen=True)
class Save:
    """A checkpoint to write: `reason` as the index says it ("epoch", "step", "request", "stop", "end",
    or a caller's own), `requested`: who asked for it ("dashboard", "command", "stop", ...; "" the run's own).
    A requested one is kept apart from the run's own (`keep_requested`, retention.py)."""

    reason: str
    requested: str = ""


@dataclass(frozen=True)
class StepDone:
    step: int  # optimizer steps done, this one included


@dataclass(frozen=True)
class Boundary:
    due: Save | None  # the save waiting for a boundary (from StepDone)
    held: bool = False  # a validation under way, or the epoch's last batch: it waits


@dataclass(frozen=True)
class EpochEnd:
    epoch: int
    last: bool = False  # the run's last epoch (its epochs, early stopping, max_steps): the final save follows
    due: Save | None = None  # a step save not made yet


@dataclass(frozen=True)
class Request:
    by: str  # who asked: "dashboard", "command", "api", ...


@dataclass(frozen=True)
class Stop:
    source: str  # who stopped the run (control.py: "dashboard", "signal", "watch", "max_time", ...)
    failed: bool = False  # the run directory could not be written: nothing is saved


@dataclass(frozen=True)
class End:
    why: str  # why the run ended: "epochs", "max_steps", "early_stopping", "max_time", "stopped", ...
    source: str = ""  # who stopped it, for "stopped"


@dataclass(frozen=True)
class Call:
    reason: str = ""  # the caller's own reason ("": none given)
    by: str = ""  # who asked for the request taken with this save ("": none)
    taken: bool = False  # a request, or the checkpoint a stop promised, was pending and is taken by this save
    stopping: bool = False  # a stop was asked for
    source: str = ""  # who asked for the stop


Moment = StepDone | Boundary | EpochEnd | Request | Stop | End | Call


@dataclass(frozen=True)
class SavePolicy:
    """The settings a decision reads: `[checkpoint] every_n_epochs`, `every_n_steps` (0: never), and
    `on_stop` (Monitor's `checkpoint_on_stop`: a stop promises a checkpoint to a loop of one's own)."""

    every_n_epochs: int = 1
    every_n_steps: int = 0
    on_stop: bool = True

    @classmethod
    def of(cls, checkpointer: Checkpointer | None, on_stop: bool = True) -> SavePolicy:
        """The policy of a `Checkpointer`'s settings (None: no checkpoints, so no periodic saves)."""
        if checkpointer is None:
            return cls(every_n_epochs=0, every_n_steps=0, on_stop=on_stop)
        return cls(checkpointer.every_n_epochs, checkpointer.every_n_steps, on_stop)

    def decide(self, moment: Moment) -> Save | None:
        """A save at `moment`, or None."""
        if isinstance(moment, StepDone):
            every = self.every_n_steps
            return Save("step") if every and moment.step % every == 0 else None
        if isinstance(moment, Boundary):
            return None if moment.held else moment.due
        if isinstance(moment, EpochEnd):
            if moment.last:
                return None
            every = self.every_n_epochs
            return Save("epoch") if every and moment.epoch % every == 0 else moment.due
        if isinstance(moment, Request):
            return Save("request", moment.by)
        if isinstance(moment, Stop):
            if not self.on_stop or moment.failed:
                return None
            return Save("stop", "stop" if stop_asked_for(moment.source) else "")
        if isinstance(moment, End):
            if moment.why in NO_FINAL:
                return None
            if moment.why not in STOPPED:
                return Save("end")
            return Save("stop", "stop" if moment.why == "stopped" and stop_asked_for(moment.source) else "")
        if isinstance(moment, Call):
            reason, by = moment.reason, moment.by
            if not by and moment.stopping and (moment.taken or reason in ("", "stop")):  # the stop's checkpoint
                return Save(reason or "stop", "stop" if stop_asked_for(moment.source) else "")
            return Save(reason or ("request" if by else "api"), by)
        raise TypeError(f"not a moment of the run: {moment!r}")
