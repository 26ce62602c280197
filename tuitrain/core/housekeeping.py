"""`Housekeeping`: a run's periodic chores (polling the control folder, sampling devices, delivering
held events), done by the training loop itself while it comes by often enough, and by daemon threads
from the moment it does not.

Why not threads from the start: a process pays for its threads on every step, asleep or not. Once a
process has started a thread, the C library's allocator locks on every allocation, and a thread
that wakes takes the GIL from the loop at its next tensor op. On a tiny model (0.28 ms steps) the
four helper threads of a headless run cost it 2-3 % of its step time
(`benchmarks/bench_all.py`). So with `inline=True` the loop calls `tick()`: at every event it emits
and every validation batch. `tick()` is a clock read and a comparison, and runs the chores that
are due. When two ticks are more than `max_gap` seconds apart (slow steps, a slow validation batch,
a user's slow callback), every chore moves to its own thread for the rest of the run: a step that
slow does not notice their cost, and the chores keep their pace during it.

With `inline=False` (the default, and what a library user gets) `add()` starts the thread at once.
Must not import torch or textual.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

#: seconds between two ticks beyond which the chores move to threads
MAX_GAP = 1.0


class _Chore:
    __slots__ = ("interval", "run", "start_thread", "due")

    def __init__(self, interval: float, run: Callable[[], None], start_thread: Callable[[], None], due: float) -> None:
        self.interval, self.run, self.start_thread, self.due = interval, run, start_thread, due


class Housekeeping:
    """Runs chores every `interval` seconds: inline at the loop's `tick()`s, or on threads."""

    def __init__(
        self, inline: bool = False, max_gap: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inline = inline
        self.clock = clock  # seconds; a test passes its own
        self.max_gap = MAX_GAP if max_gap is None else max_gap
        self._chores: list[_Chore] = []
        self._next = math.inf  # when the soonest chore is due
        self._last: float | None = None  # the previous tick
        self._lock = threading.RLock()  # a chore may add one (an event it emits)
        self._ticking = False  # a tick inside a chore's tick returns at once

    def add(self, interval: float, run: Callable[[], None], start_thread: Callable[[], None]) -> None:
        """A chore: `run()` does it once; `start_thread()` starts a thread that does it every
        `interval` seconds (called at once unless inline)."""
        with self._lock:
            if self.inline:
                chore = _Chore(interval, run, start_thread, self.clock() + interval)
                self._chores.append(chore)
                self._next = min(self._next, chore.due)
                return
        start_thread()

    def tick(self) -> None:
        """Called by the loop: runs the chores that are due (inline), or moves them to threads when
        the loop has been away for longer than `max_gap`."""
        if not self.inline or self._ticking or not self._lock.acquire(blocking=False):
            return
        self._ticking = True
        try:
            now = self.clock()
            last, self._last = self._last, now
            if last is not None and now - last > self.max_gap:
                self._to_threads()
                return
            if now < self._next:
                return
            for chore in tuple(self._chores):
                if now >= chore.due:
                    chore.due = now + chore.interval
                    try:
                        chore.run()
                    except Exception:  # a chore must never end training
                        pass
            self._next = min((c.due for c in self._chores), default=math.inf)
        finally:
            self._ticking = False
            self._lock.release()

    def _to_threads(self) -> None:
        self.inline = False
        chores, self._chores, self._next = self._chores, [], math.inf
        for chore in chores:
            chore.start_thread()

    def to_threads(self) -> None:
        """Hand every chore to its thread now (the loop will not come by for a while)."""
        with self._lock:
            if self.inline:
                self._to_threads()
