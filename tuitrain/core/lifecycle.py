"""A run's life between its start and its end, whatever loop drives it: the one place for what every run
does there.

`Lifecycle` is driven by the core's `CoreLearner.fit` and by `Monitor` (a loop of the user's own, and the
Lightning and Hugging Face integrations through it):
- at a boundary (a step's end, a log): the control requests said as `ControlReceived`, a checkpoint
  asked for handed to whoever saves, a pause waited out (`RunPaused` ... `RunResumed`);
- the run's summary (`Summary`: min, max and last of every metric);
- its end: `finished(reason)` (`RunFinished`, status and exit code from the reason) or `failed(error)`
  (`RunFailed`, whatever the cause: the user's code, a full disk, out of memory, a stall, a crashed
  rank, a config found wrong while building).

`run_failed` is the one constructor of `RunFailed` in tuitrain: a front door that fails before any run
exists (a rank that could not start, a build that failed) says so through it too. Must not import
textual or the run layer.
"""

from __future__ import annotations

import math
import time
import traceback as tb_module
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .events import ControlReceived, Event, RunFailed, RunFinished, RunPaused, RunResumed
from .state import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, HealthFailure, NonFiniteLoss, RunDirUnwritable

if TYPE_CHECKING:
    from .control import Interrupter


class Emitter(Protocol):
    """Where a lifecycle's events go (an `EventBus`; a `Monitor` building one to read its flags: a no-op)."""

    def emit(self, event: Event) -> None: ...


#: stop reasons that end a run as interrupted (exit 130); others ("max_time", "epochs" ...) complete it
INTERRUPTING = ("stopped", "preempted", "killed", "pruned")


def outcome(reason: str) -> tuple[str, int]:
    """(status, exit code) of a run that ended for `reason` without failing."""
    return ("interrupted", EXIT_INTERRUPTED) if reason in INTERRUPTING else ("completed", EXIT_OK)


def out_of_memory(e: BaseException) -> bool:
    """CUDA's (or MPS's) out-of-memory error, or a MemoryError on the CPU."""
    if isinstance(e, MemoryError):
        return True
    import sys

    torch = sys.modules.get("torch")  # only a run that imported torch can have run out of its memory
    if torch is not None and isinstance(e, getattr(torch, "OutOfMemoryError", ())):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def describe(e: BaseException) -> tuple[str, str, str]:
    """(the one line, the traceback, the cause) a run that failed on `e` reports."""
    tb = "".join(tb_module.format_exception(e)) if e.__traceback__ is not None else ""
    if isinstance(e, RunDirUnwritable):
        return e.line, e.traceback_text or tb, "write_failed"
    if isinstance(e, (NonFiniteLoss, HealthFailure)):
        return str(e), tb, ""
    return f"{type(e).__name__}: {e}", tb, "out_of_memory" if out_of_memory(e) else ""


def run_failed(
    error: BaseException | str,
    *,
    epoch: int = 0,
    step: int = 0,
    traceback: str = "",
    duration: float = 0.0,
    summary: dict[str, dict[str, Any]] | None = None,
    cause: str = "",
    checkpoint: str = "",
    exit_code: int = EXIT_FAILED,
) -> RunFailed:
    """The `RunFailed` event of a run that failed on `error` (an exception, or the line to say)."""
    if isinstance(error, BaseException):
        line, tb, found = describe(error)
        traceback, cause = traceback or tb, cause or found
        error = line
    return RunFailed(
        error=error,
        traceback=traceback,
        epoch=epoch,
        step=step,
        exit_code=exit_code,
        duration=duration,
        summary=dict(summary or {}),
        cause=cause,
        checkpoint=checkpoint,
    )


class Summary:
    """min, max and last of every metric of a run ("train/loss" -> {"min", "max", "last"}), with the
    epochs of the min and max when the run counts epochs (`add(..., epoch=n)`). NaN is in no min or max."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    @classmethod
    def of(cls, history: Mapping[str, Sequence[Sequence[Any]]]) -> Summary:
        """From a Learner's history ("train/loss" -> [[epoch, value], ...])."""
        summary = cls()
        for key, pairs in history.items():
            for epoch, value in pairs:
                summary.add(key, value, epoch)
            if key in summary.rows and pairs:
                summary.rows[key]["last"] = pairs[-1][1]
        return summary

    def add(self, key: str, value: object, epoch: int | None = None) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            return
        row = self.rows.get(key)
        if row is None:
            self.rows[key] = (
                {"min": value, "max": value, "last": value}
                if epoch is None
                else {"min": value, "min_epoch": epoch, "max": value, "max_epoch": epoch, "last": value}
            )
            return
        if value < row["min"]:
            row["min"] = value
            if epoch is not None:
                row["min_epoch"] = epoch
        if value > row["max"]:
            row["max"] = value
            if epoch is not None:
                row["max_epoch"] = epoch
        row["last"] = value

    def table(self) -> dict[str, dict[str, Any]]:
        return {key: dict(row) for key, row in self.rows.items()}


class StopCheckpoint:
    """The checkpoint a stop promises a loop of one's own (`Monitor.checkpoint_on_stop`), told to it
    before the stop itself, so that a loop that checks both `checkpoint_requested` and `stop_requested`
    saves at the stop whichever it checks first. Its states:

        NONE  --stop seen, a checkpoint promised-->  DUE  --the loop told-->  SHOWN  --taken (saved)-->  NONE

    The loop is told by `checkpoint_requested` (True while DUE or SHOWN), or by `stop_requested` saying
    False once more while DUE (it moves to SHOWN: the loop's next pass sees the request first). A stop
    is seen once: a checkpoint taken stays taken."""

    NONE, DUE, SHOWN = "", "due", "shown"

    def __init__(self) -> None:
        self.seen = False  # a stop was seen
        self.state = self.NONE

    def see(self, stop: bool, promised: bool) -> None:
        """The stop flag as read now; `promised`: the checkpoint a stop raises, if this is the first."""
        if stop and not self.seen:
            self.seen = True
            if promised:
                self.state = self.DUE

    def asked(self) -> bool:
        """`checkpoint_requested`'s part: the promised checkpoint is pending (and now told)."""
        if self.state == self.DUE:
            self.state = self.SHOWN
        return self.state != self.NONE

    def stop(self, stop: bool) -> bool:
        """`stop_requested`'s answer for a stop flag of `stop`: held back once while the loop has not
        been told of the checkpoint yet."""
        if stop and self.state == self.DUE:
            self.state = self.SHOWN
            return False
        return stop

    def take(self) -> bool:
        """A save takes the promised checkpoint: whether one was pending."""
        pending, self.state = self.state != self.NONE, self.NONE
        return pending


class Lifecycle:
    """What a run does between start and finish, for any loop. `bus`: where its events go; `flags`: the
    `Interrupter` (or a rank's agreed one) whose requests it applies; `save(by)`: saves the checkpoint
    that `by` ("dashboard", "command") asked for (None: the loop takes requests itself, as a `Monitor`'s
    does); `chores()`: called while paused, every `PAUSE_POLL` seconds (files flushed, a resume read from
    the control folder)."""

    PAUSE_POLL = 0.1

    def __init__(
        self,
        bus: Emitter,
        flags: Interrupter,
        *,
        save: Callable[[str], None] | None = None,
        chores: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bus, self.flags, self.save, self.chores, self.clock = bus, flags, save, chores, clock
        self.started = clock()
        self.summary = Summary()
        #: called with the seconds a pause took, as it ends (the metrics' clocks leave it out)
        self.after_pause: list[Callable[[float], None]] = []
        self.ended = False
        #: the checkpoint a stop promises a loop of one's own (Monitor)
        self.stop_checkpoint = StopCheckpoint()

    def duration(self) -> float:
        return self.clock() - self.started

    # --- at a boundary -----------------------------------------------------------------------------

    def report(self) -> None:
        """The control requests taken since the last call, said as `ControlReceived`."""
        for command, source, detail in self.flags.take_log():
            self.bus.emit(ControlReceived(command=command, source=source, detail=detail))

    def take_checkpoint(self) -> None:
        """A checkpoint asked for, saved (when this lifecycle saves)."""
        if self.save is None:
            return
        by = self.flags.take_checkpoint_by()
        if by:
            self.save(by)

    def boundary(self, epoch: int, step: int) -> None:
        """The requests said, a checkpoint asked for saved, a pause waited out. A stop is the caller's to
        act on (`flags.stop_requested`): a Learner raises, a loop of one's own is told."""
        self.report()
        self.take_checkpoint()
        flags = self.flags
        if flags.paused and not flags.stop_requested:
            self.pause(epoch, step)
        self.report()

    def pause(self, epoch: int, step: int) -> float:
        """Wait while paused (a stop or a failure ends the wait); the seconds it took."""
        flags = self.flags
        t0 = self.clock()
        self.bus.emit(RunPaused(epoch=epoch, step=step))
        while flags.paused and not flags.stop_requested and not getattr(flags, "failure", ""):
            flags.wait_while_paused(self.PAUSE_POLL)
            if self.chores is not None:
                self.chores()
            self.report()
            self.take_checkpoint()
        paused_for = self.clock() - t0
        for hook in self.after_pause:
            hook(paused_for)
        self.bus.emit(RunResumed(epoch=epoch, step=step, paused_for=paused_for))
        return paused_for

    # --- the end -----------------------------------------------------------------------------------

    def finished(
        self,
        reason: str,
        *,
        epoch: int,
        step: int,
        summary: dict[str, dict[str, Any]] | None = None,
        best: dict[str, Any] | None = None,
    ) -> RunFinished:
        """The run ended without failing, for `reason`: `RunFinished`, status and exit code from it."""
        status, code = outcome(reason)
        event = RunFinished(
            status=status,
            exit_code=code,
            epoch=epoch,
            step=step,
            reason=reason,
            duration=self.duration(),
            summary=self.summary.table() if summary is None else summary,
            best=dict(best or {}),
        )
        self.ended = True
        self.bus.emit(event)
        return event

    def failed(
        self,
        error: BaseException | str,
        *,
        epoch: int,
        step: int,
        summary: dict[str, dict[str, Any]] | None = None,
        traceback: str = "",
        cause: str = "",
        checkpoint: str = "",
    ) -> RunFailed:
        """The run failed on `error`: `RunFailed` (exit code 1), with the last sound checkpoint."""
        event = run_failed(
            error,
            epoch=epoch,
            step=step,
            traceback=traceback,
            duration=self.duration(),
            summary=self.summary.table() if summary is None else summary,
            cause=cause,
            checkpoint=checkpoint,
        )
        self.ended = True
        self.bus.emit(event)
        return event
