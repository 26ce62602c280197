"""What a fit's training runs inside (`TrainingSession`): the garbage collector frozen on what exists when
it starts, freed memory kept in the process (heap.py), the `max_time` clock and the stall watchdog; and
what a `max_time` spent or an out-of-memory error says. Out of learner.py, which puts them around its
loop. Must not import textual.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import heap

if TYPE_CHECKING:
    from .learner_health import HealthGuard
    from .state import TrainState


def seconds(t: float) -> str:
    """3725.0 -> "1h2m5s"."""
    t = int(round(t))
    h, rest = divmod(t, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"


def max_time_spent(max_time: float) -> str:
    """The line said when `max_time` ends a run."""
    return f"max_time ({seconds(max_time)}) spent: training stops here, as completed"


def out_of_memory_advice(e: BaseException, *, stage: str, batch_size: int, device: object, from_config: bool) -> str:
    """What to change after an out-of-memory error, in place of torch's line; `from_config`: the run has a
    config (its keys are named), else the Learner's arguments are."""
    first = (str(e).strip().splitlines() or [""])[0]
    what = f"{type(e).__name__}: {first}" if first else type(e).__name__
    batch, accumulate = (
        ("data.batch_size", "train.grad_accumulation")
        if from_config
        else ("data=Data(batch_size=...)", "train=Train(grad_accumulation=...)")
    )
    return (
        f"out of memory in a {stage} step with batch size {batch_size} on "
        f"{device} ({what}); lower {batch}, and raise {accumulate} to keep the same "
        "effective batch"
    )


class TrainingSession:
    """A context for the loop: on entry the collector stops walking what exists now (`freeze_gc`, unless
    the program froze the heap itself), freed memory is kept (`keep_freed_memory`), this session's clock
    starts (`state.session_start`), a timer calls `time_up(budget)` when `max_time` seconds of training
    (over every resume) are spent, and `guard`'s watchdog starts; on exit all of it is undone."""

    def __init__(
        self,
        *,
        state: TrainState,
        guard: HealthGuard,
        time_up: Callable[[str], None],
        max_time: float,
        freeze_gc: bool,
        keep_freed_memory: bool,
    ) -> None:
        self.state, self.guard, self.time_up, self.max_time = state, guard, time_up, max_time
        self.freeze_gc, self.keep_freed_memory = freeze_gc, keep_freed_memory
        self.frozen = self.kept = False
        self.timer: threading.Timer | None = None

    def __enter__(self) -> TrainingSession:
        # what exists now lives as long as the run: the collector stops walking it
        self.frozen = self.freeze_gc and gc.isenabled() and gc.get_freeze_count() == 0
        if self.frozen:  # (no collection first: garbage frozen now is collected after the unfreeze)
            gc.freeze()
        self.kept = self.keep_freed_memory and heap.keep_freed_memory()
        self.state.session_start = time.monotonic()
        if self.max_time:
            left = self.max_time - self.state.time_used
            self.timer = threading.Timer(max(left, 0.0), self.time_up, args=(seconds(self.max_time),))
            self.timer.daemon = True
            self.timer.start()
        self.guard.start_watchdog()
        return self

    def __exit__(self, *exc: object) -> None:
        self.guard.stop_watchdog()
        if self.timer is not None:
            self.timer.cancel()
        if self.frozen:
            gc.unfreeze()
        if self.kept:
            heap.release_freed_memory()
