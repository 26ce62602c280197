"""The event bus: one hook signature, `callback(event, state)`, for sinks, the dashboard and users.

A callback is any callable taking `(event, state)`; dispatch inside it with `match event:`.
Per-step events (StepStarted/StepCompleted) only reach callbacks subscribed with `steps=True`,
so that file sinks cost nothing per step. Must not import torch or textual.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any, Callable, Iterable

from .events import Event, OutputPrinted

Callback = Callable[[Event, Any], None]


class CallbackBase:
    """Optional base: subclass and override `__call__(event, state)`; `close()` runs at the end."""

    #: set False when the callback ignores StepStarted/StepCompleted (saves a call per step)
    step_events: bool = True

    def __call__(self, event: Event, state: Any) -> None:  # pragma: no cover - meant to be overridden
        pass

    def close(self) -> None:
        pass


class EventBus:
    """Delivers each event to every callback, in order, one event at a time (thread-safe)."""

    def __init__(self, callbacks: Iterable[Callback] = ()) -> None:
        self._lock = threading.RLock()
        self._all: list[Callback] = []
        self._steps: list[Callback] = []
        self.state: Any = None
        self.errors: list[str] = []
        for cb in callbacks:
            self.subscribe(cb)

    def subscribe(self, callback: Callback, steps: bool | None = None) -> None:
        if steps is None:
            steps = bool(getattr(callback, "step_events", True))
        with self._lock:
            self._all.append(callback)
            if steps:
                self._steps.append(callback)

    @property
    def wants_steps(self) -> bool:
        return bool(self._steps)

    def emit(self, event: Event) -> None:
        with self._lock:
            for cb in self._all:
                self._call(cb, event)

    def emit_step(self, event: Event) -> None:
        with self._lock:
            for cb in self._steps:
                self._call(cb, event)

    def _call(self, cb: Callback, event: Event) -> None:
        try:
            cb(event, self.state)
        except Exception:  # a broken sink must not take training down; say so once per sink
            name = getattr(cb, "__qualname__", type(cb).__name__)
            msg = f"callback {name} failed on {event.name}:\n{traceback.format_exc()}"
            if msg not in self.errors:
                self.errors.append(msg)
                if not isinstance(event, OutputPrinted):
                    self.emit(OutputPrinted(text=msg.rstrip(), stream="tuitrain"))

    def close(self) -> None:
        with self._lock:
            for cb in self._all:
                close = getattr(cb, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:
                        pass
