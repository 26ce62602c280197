"""Ctrl+C and SIGTERM for a run, whichever way it started (the CLI, `Learner.fit`, `Monitor`): the
first asks the Interrupter for a graceful stop (a checkpoint is saved), a second Ctrl+C raises
KeyboardInterrupt. Must not import torch or textual.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from tuitrain.core.control import Interrupter


class StopOnSignals:
    """A context manager: the handlers while the block runs, the previous ones after it (the CLI enters
    it for the life of the process). `sigint=False` leaves Ctrl+C to the dashboard. Main thread only."""

    def __init__(self, interrupter: Interrupter, sigint: bool) -> None:
        self.interrupter = interrupter
        self.sigint = sigint
        self.count = 0
        self.saved: dict[int, Any] = {}

    def on_term(self, signum, frame) -> None:
        self.interrupter.request_stop("signal", signal.Signals(signum).name)

    def on_int(self, signum, frame) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        self.interrupter.request_stop("signal", "SIGINT")

    def __enter__(self) -> "StopOnSignals":
        if threading.current_thread() is threading.main_thread():
            self.saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, self.on_term)
            if self.sigint:
                self.saved[signal.SIGINT] = signal.signal(signal.SIGINT, self.on_int)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
