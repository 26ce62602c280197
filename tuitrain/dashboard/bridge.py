"""`EventBridge`: the hand-off between the training thread and the dashboard's event loop.

The bridge is an `(event, state)` callback. On the training thread it only appends to a deque
(no Textual call, no message per step); the app drains it 10-20 times a second. Per-step events
are folded on arrival into a bounded buffer, so a stalled screen never grows memory by the step.
Must not import textual.
"""

from __future__ import annotations

import threading
from collections import deque

from tuitrain.core.events import Event, StepCompleted, StepStarted

MAX_STEP_EVENTS = 256  # newest per-step events kept between two drains; older ones only counted


class EventBridge:
    """Thread-safe event buffer: `bridge(event, state)` from any thread, `drain()` from the UI."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: deque[Event] = deque()
        self._steps: deque[Event] = deque(maxlen=MAX_STEP_EVENTS)
        self.received = 0  # events seen in total, for tests and diagnostics
        self.dropped_steps = 0  # per-step events folded away while the screen lagged

    def __call__(self, event: Event, state: object = None) -> None:
        with self._lock:
            self.received += 1
            if isinstance(event, (StepStarted, StepCompleted)):
                if len(self._steps) == MAX_STEP_EVENTS:
                    self.dropped_steps += 1
                self._steps.append(event)
            else:
                # a step event must stay before the persistent event that followed it
                if self._steps:
                    self._events.extend(self._steps)
                    self._steps.clear()
                self._events.append(event)

    def emit(self, event: Event) -> None:
        """The one-argument form (DeviceMonitor, file tailer)."""
        self(event, None)

    def drain(self, limit: int | None = None) -> list[Event]:
        """What was received since the last drain, in order; at most `limit` events, so that
        catching up on a long events.jsonl never freezes the screen for more than a moment."""
        with self._lock:
            if limit is None or len(self._events) + len(self._steps) <= limit:
                out = list(self._events)
                out.extend(self._steps)
                self._events.clear()
                self._steps.clear()
                return out
            n = min(limit, len(self._events))
            out = [self._events.popleft() for _ in range(n)]
            if n < limit:  # the persistent events are all out: the step events follow them
                out.extend(self._steps.popleft() for _ in range(min(limit - n, len(self._steps))))
            return out

    def pending(self) -> bool:
        return bool(self._events or self._steps)

    def __len__(self) -> int:
        return len(self._events) + len(self._steps)
