"""`Throughput`: a run's speed (items/s, steps/s) from its recent training steps, for the progress
panel's speed and ETA (`DashboardState.rates`, model.py).

A tick is a training step seen: (time, step, items, stretch). A stretch is training without a gap: a
validation, a pause or a new session begins the next one, and only consecutive ticks of one stretch
are timed, so the gaps are left out of the speed. Ticks come one at a time (a live run's StepCompleted,
a file's logged step) or as a block's arrays (a file read with numpy), kept waiting until the speed is
asked for. Pure Python and numpy: must not import textual.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

WARMUP_STEPS = 5  # steps ignored before items/s and ETA are shown (compilation, loader start-up)
RATE_WINDOW = 50  # training steps the items/s average covers


class Throughput:
    """The recent ticks and the speed they give. `batch_size`: the run's, read when a block's ticks are
    counted (a file's logged steps are `batch_size` items each)."""

    def __init__(self, batch_size: Callable[[], int]) -> None:
        self.batch_size = batch_size
        self.ticks: deque[tuple[float, int, int, int]] = deque(maxlen=RATE_WINDOW + 1)
        self.stretch = 0
        self.steps_seen = 0  # training steps seen this session (the warm-up counts them)
        self.waiting: list[tuple[np.ndarray, np.ndarray, int]] = []  # blocks' (steps, times, stretch), not yet ticks
        self.last_rates: tuple[float | None, float | None] = (None, None)

    def gap(self) -> None:
        """What follows is not training time continued (a validation, a pause between)."""
        self.stretch += 1

    def restart(self) -> None:
        """A new session: speed and ETA start over (its machine, its warm-up)."""
        self.ticks.clear()
        self.waiting = []
        self.steps_seen = 0
        self.last_rates = (None, None)
        self.stretch += 1

    def last_step(self) -> int | None:
        """The newest training step ticked, None before the first."""
        self.fold()
        return self.ticks[-1][1] if self.ticks else None

    def tick(self, t: float, step: int, items: int, steps: int = 1) -> bool:
        """One training step at time `t` (`steps`: how many it stands for); False for a step seen already
        (validation reports the current step)."""
        if self.waiting:
            self.fold()
        if self.ticks and step <= self.ticks[-1][1]:
            return False
        self.ticks.append((t, step, items, self.stretch))
        self.steps_seen += max(steps, 1)
        return True

    def wait(self, steps: np.ndarray, times: np.ndarray) -> None:
        """A block's logged training steps and their times, ticked when the speed is next asked for."""
        self.waiting.append((steps, times, self.stretch))
        if len(self.waiting) > 64:
            self.fold()

    def fold(self) -> None:
        """The blocks' logged training steps as ticks, those of one stretch at once."""
        if not self.waiting:
            return
        waiting, self.waiting = self.waiting, []
        while waiting:
            stretch = waiting[0][2]
            same = next((i for i, w in enumerate(waiting) if w[2] != stretch), len(waiting))
            part, waiting = waiting[:same], waiting[same:]
            self._ticks_of(np.concatenate([w[0] for w in part]), np.concatenate([w[1] for w in part]), stretch)

    def _ticks_of(self, steps: np.ndarray, times: np.ndarray, stretch: int) -> None:
        """`tick` of each logged training step of a block (only the newest RATE_WINDOW + 1 are kept)."""
        prev = self.ticks[-1][1] if self.ticks else None
        before = np.maximum.accumulate(np.concatenate(([-np.inf if prev is None else prev], steps)))[:-1]
        new = steps > before  # a repeated step (validation reports the current one) is not a tick
        kept, at = steps[new], times[new]
        if not kept.size:
            return
        gaps = np.diff(kept, prepend=kept[0] - 1 if prev is None else prev)
        first_items = 0 if prev is None else None  # the first tick of all counts no items
        self.steps_seen += int(np.maximum(gaps, 1).sum())
        start = max(0, kept.size - (self.ticks.maxlen or kept.size))
        batch_size = self.batch_size()
        for i in range(start, kept.size):
            items = first_items if i == 0 and first_items is not None else int(gaps[i]) * batch_size
            self.ticks.append((float(at[i]), int(kept[i]), items, stretch))

    def rates(self) -> tuple[float | None, float | None]:
        """(items/s, steps/s) over recent training steps; None during warm-up or when unknown.

        Right after a phase starts (too few steps to measure) the previous phase's rate stands.
        """
        self.fold()
        if self.steps_seen < WARMUP_STEPS or len(self.ticks) < 3:
            return self.last_rates
        # over consecutive ticks of one stretch: short epochs add up, their gaps are left out
        dt, steps, items, pairs = 0.0, 0, 0, 0
        ticks = list(self.ticks)
        for (t0, s0, _, k0), (t1, s1, n1, k1) in zip(ticks, ticks[1:]):
            if k0 == k1:
                dt, steps, items, pairs = dt + t1 - t0, steps + s1 - s0, items + n1, pairs + 1
        if pairs < 2 or dt <= 0 or steps <= 0:
            return self.last_rates
        self.last_rates = (items / dt, steps / dt)
        return self.last_rates


__all__ = ["RATE_WINDOW", "WARMUP_STEPS", "Throughput"]
