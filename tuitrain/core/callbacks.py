"""The event bus: one hook signature, `callback(event, state)`, for sinks, the dashboard and users.

A callback is any callable taking `(event, state)`; dispatch inside it with `match event:`.
Per-step events (StepStarted/StepCompleted) only reach callbacks subscribed with `steps=True`,
so that file sinks cost nothing per step; a callback subscribed with `steps="sampled"` (a screen's
progress bar) gets a StepCompleted for the first steps of each phase and then at most every
`STEP_SAMPLE_INTERVAL` seconds, carrying the items of every step since the last one, and the loop
keeps its fast path. Callbacks subscribed with `batched=True` (the built-in sinks) get every event in
the same order, but in batches: the frequent events (logged metrics, device samples, printed output)
wait in a queue until any other event comes or `BATCH_INTERVAL` has passed, so that the training
loop pays a list append, not a JSON line and a file write, per logged step.
Must not import torch or textual.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable, Iterable

from .events import DevicesSampled, Event, MetricsLogged, OutputPrinted

Callback = Callable[[Event, Any], None]

#: events that may wait for a batch; any other event delivers the queue at once, itself included
BATCHABLE = (MetricsLogged, DevicesSampled, OutputPrinted)
#: seconds a batchable event may wait in the queue (checked whenever an event is emitted)
BATCH_INTERVAL = 0.25
#: seconds between the StepCompleted events that `steps="sampled"` callbacks get
STEP_SAMPLE_INTERVAL = 0.1


class CallbackBase:
    """Optional base: subclass and override `__call__(event, state)`; `close()` runs at the end."""

    #: set False when the callback ignores StepStarted/StepCompleted (saves a call per step)
    step_events: bool = True
    #: set True when the callback may receive events in batches, a fraction of a second late
    batch_events: bool = False

    def __call__(self, event: Event, state: Any) -> None:  # pragma: no cover - meant to be overridden
        pass

    def close(self) -> None:
        pass


class EventBus:
    """Delivers each event to every callback, in order (thread-safe); batched callbacks get the
    frequent events in batches (see the module docstring)."""

    def __init__(self, callbacks: Iterable[Callback] = (), batch_interval: float = BATCH_INTERVAL) -> None:
        self._lock = threading.RLock()
        self._all: list[Callback] = []  # called at once
        self._batched: list[Callback] = []
        self._steps: list[Callback] = []  # every step
        self._sampled: list[Callback] = []  # a step now and then
        self._queue: list[Event] = []
        self._queued_at = 0.0  # when the oldest queued event came
        self.batch_interval = batch_interval
        self.state: Any = None
        self.errors: list[str] = []
        for cb in callbacks:
            self.subscribe(cb)

    def subscribe(self, callback: Callback, steps: bool | str | None = None, batched: bool | None = None) -> None:
        """`steps`: True (every per-step event), "sampled" (see the module docstring) or False; None
        reads the callback's `step_events` attribute (default True)."""
        if steps is None:
            steps = getattr(callback, "step_events", True)
        if steps not in (True, False, "sampled"):
            raise ValueError(f"steps must be True, False or 'sampled', not {steps!r}")
        if batched is None:
            batched = bool(getattr(callback, "batch_events", False))
        with self._lock:
            (self._batched if batched else self._all).append(callback)
            if steps == "sampled":
                self._sampled.append(callback)
            elif steps:
                self._steps.append(callback)

    @property
    def wants_steps(self) -> bool:
        """A callback takes every per-step event: the loop emits them all."""
        return bool(self._steps)

    @property
    def wants_sampled_steps(self) -> bool:
        """Only sampled callbacks take per-step events: the loop emits one every STEP_SAMPLE_INTERVAL."""
        return bool(self._sampled) and not self._steps

    @property
    def step_mode(self) -> bool | str:
        """What the callbacks want, as `subscribe` takes it: True, "sampled" or False."""
        return True if self._steps else "sampled" if self._sampled else False

    def emit(self, event: Event) -> None:
        with self._lock:
            for cb in self._all:
                self._call(cb, event)
            if self._batched:
                queue, now = self._queue, time.monotonic()
                if not queue:
                    self._queued_at = now
                queue.append(event)
                if not isinstance(event, BATCHABLE) or now - self._queued_at >= self.batch_interval:
                    self.deliver()

    def deliver(self) -> None:
        """Hand the queued events to the batched callbacks now."""
        with self._lock:
            queue, self._queue = self._queue, []
            for event in queue:
                for cb in self._batched:
                    self._call(cb, event)

    def emit_step(self, event: Event) -> None:
        with self._lock:
            for cb in self._steps:
                self._call(cb, event)
            for cb in self._sampled:
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
            self.deliver()
            for cb in self._all + self._batched:
                close = getattr(cb, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:
                        pass
