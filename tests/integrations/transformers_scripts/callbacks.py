"""The user's own `TrainerCallback`s of test_transformers.py, beside tuitrain's: imported by the tests that
use them (the test module imports no transformers at collection: ~3 s of each pytest-xdist worker's start)."""

from __future__ import annotations

import threading

from transformers import TrainerCallback


class Histograms(TrainerCallback):
    """A callback of the user's logging the weights' distribution through tuitrain's, every 5 steps."""

    def __init__(self, tc) -> None:
        self.tc = tc

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % 5 == 0:
            self.tc.log_histogram("weights/lm_head", model.lm_head.weight)


class Gate(TrainerCallback):
    """Holds the Trainer at the end of a step until the test lets it go, so that a request sent from
    another thread lands at a known step."""

    def __init__(self) -> None:
        self.step = threading.Condition()
        self.at = 0
        self.released = 0

    def on_step_end(self, args, state, control, **kwargs):
        with self.step:
            self.at = state.global_step
            self.step.notify_all()
            assert self.step.wait_for(lambda: self.released >= state.global_step, timeout=60)

    def wait_for_step(self, n: int) -> None:
        with self.step:
            assert self.step.wait_for(lambda: self.at >= n, timeout=120), f"step {n} never came"

    def release(self, n: int) -> None:
        with self.step:
            self.released = n
            self.step.notify_all()


class FailOnce(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step, self.failed = step, False

    def on_step_end(self, args, state, control, **kwargs):
        if not self.failed and state.global_step == self.step:
            self.failed = True
            raise RuntimeError("failed once on purpose")
