"""Ctrl+C, SIGTERM and the cluster's SIGUSR1/SIGUSR2 for a run, whichever way it started (the CLI,
`Learner.fit`, `Monitor`, a torchrun rank): the first Ctrl+C or SIGTERM asks the Interrupter for a graceful
stop (a checkpoint is saved), a second Ctrl+C raises KeyboardInterrupt; SIGUSR1/SIGUSR2 (Slurm's
`--signal`, submitit's) mean "time is up": a graceful stop as a preemption (reason "preempted").
Must not import torch or textual.
"""

from __future__ import annotations

import signal
import threading
from typing import Any
from collections.abc import Callable

from tuitrain.core.control import Interrupter


#: "time is up" (Slurm's `--signal=USR1@90`; submitit sends USR2)
PREEMPTION_SIGNALS = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2") if hasattr(signal, name))


class StopOnSignals:
    """A context manager: the handlers while the block runs, the previous ones after it (the CLI enters
    it for the life of the process). `sigint=False` leaves Ctrl+C to the dashboard; `then` is called on a
    second Ctrl+C instead of raising KeyboardInterrupt here (a run training on another thread is ended there).
    Main thread only."""

    def __init__(self, interrupter: Interrupter, sigint: bool, then: Callable[[], None] | None = None) -> None:
        self.interrupter = interrupter
        self.sigint = sigint
        self.then = then
        self.count = 0
        self.saved: dict[int, Any] = {}

    def on_term(self, signum, frame) -> None:
        self.interrupter.request_stop("signal", signal.Signals(signum).name)

    def on_time_up(self, signum, frame) -> None:
        self.interrupter.preempt(signal.Signals(signum).name)

    def on_int(self, signum, frame) -> None:
        self.count += 1
        if self.count > 1:
            if self.then is not None:
                return self.then()
            raise KeyboardInterrupt
        self.interrupter.request_stop("signal", "SIGINT")

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is threading.main_thread():
            self.saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, self.on_term)
            for signum in PREEMPTION_SIGNALS:
                self.saved[signum] = signal.signal(signum, self.on_time_up)
            if self.sigint:
                self.saved[signal.SIGINT] = signal.signal(signal.SIGINT, self.on_int)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)


def carry_preemption(interrupter: Interrupter, learner) -> None:
    """The Learner reads why it stopped from its own interrupter; under DDP/FSDP that is the agreed one
    (a SyncedInterrupter over `interrupter`), whose flags carry a stop but not its reason: a preemption
    that reaches this rank says "preempted" there too."""
    agreed = learner.interrupter
    if agreed is interrupter:
        return

    def carry() -> None:
        agreed.stop_reason = "preempted"

    interrupter.on_preempt.append(carry)
    if interrupter.stop_reason == "preempted":  # it came while the Learner was being built
        carry()


def die_with_parent(signum: int = signal.SIGTERM):
    """A `preexec_fn` for a helper process (a sweep's trial, a notebook's picture): `signum` reaches it
    when the thread that started it ends, the whole process killed included (Linux's PR_SET_PDEATHSIG;
    elsewhere None: nothing). libc's prctl is looked up here, before the fork: the child runs one call,
    no import (the import lock may be held by another thread at the fork)."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(1, signum)  # PR_SET_PDEATHSIG

    return arm
