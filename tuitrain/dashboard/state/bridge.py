"""`EventBridge`: the hand-off between the training thread and the dashboard's event loop.

The bridge is an `(event, state)` callback. On the training thread it only appends to a deque
(no Textual call, no message per step); the app drains it 10-20 times a second. Per-step events
are coalesced on arrival: between two drains only the newest StepStarted and StepCompleted are kept
(the latter carrying the items of every step folded into it), so the screen's work does not grow
with the step rate and a stalled screen never grows memory by the step.
Must not import textual.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque

from tuitrain.core.events import Event, StepCompleted, StepStarted


class EventBridge:
    """Thread-safe event buffer: `bridge(event, state)` from any thread, `drain()` from the UI."""

    #: a progress bar needs a step now and then, not every one (the loop keeps its fast path)
    step_events = "sampled"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: deque[Event] = deque()
        self._started: StepStarted | None = None  # newest since the last flush
        self._completed: StepCompleted | None = None
        self._items = 0  # items of every StepCompleted folded into `_completed`
        self.received = 0  # events seen in total, for tests and diagnostics
        self.dropped_steps = 0  # per-step events folded away (coalesced) before a drain

    def __call__(self, event: Event, state: object = None) -> None:
        with self._lock:
            self.received += 1
            if type(event) is StepCompleted:
                if self._completed is not None:
                    self.dropped_steps += 1
                self._completed = event
                self._items += event.items
            elif type(event) is StepStarted:
                if self._started is not None:
                    self.dropped_steps += 1
                self._started = event
            elif event.persistent:
                self._flush_steps()  # a step event must stay before the event that followed it
                self._events.append(event)
            # other per-step events (a phase's StepPoints) show nothing on screen: not kept

    def _flush_steps(self) -> None:
        done, started = self._completed, self._started
        if done is not None:
            if done.items != self._items:
                done = dataclasses.replace(done, items=self._items)
            self._events.append(done)
        if started is not None and (done is None or started.step > done.step or started.phase != done.phase):
            self._events.append(started)  # a step under way after the last completed one
        self._completed = self._started = None
        self._items = 0

    def emit(self, event: Event) -> None:
        """The one-argument form (DeviceMonitor, file tailer)."""
        self(event, None)

    def drain(self, limit: int | None = None) -> list[Event]:
        """What was received since the last drain, in order; at most `limit` events, so that
        catching up on a long events.jsonl never freezes the screen for more than a moment."""
        with self._lock:
            self._flush_steps()
            if limit is None or len(self._events) <= limit:
                out = list(self._events)
                self._events.clear()
                return out
            return [self._events.popleft() for _ in range(limit)]

    def pending(self) -> bool:
        return bool(self._events or self._started or self._completed)

    def __len__(self) -> int:
        return len(self._events) + (self._started is not None) + (self._completed is not None)
