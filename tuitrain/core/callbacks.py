"""The event bus: one hook signature, `callback(event, state)`, for sinks, the dashboard and users.

A callback is any callable taking `(event, state)`; dispatch inside it with `match event:`.
Per-step events (StepStarted/StepCompleted) only reach callbacks subscribed with `steps=True`,
so that file sinks cost nothing per step; a callback subscribed with `steps="sampled"` (a screen's
progress bar) gets a StepCompleted for the first steps of each phase and then at most every
`STEP_SAMPLE_INTERVAL` seconds, carrying the items of every step since the last one, and the loop
keeps its fast path. Callbacks subscribed with `batched=True` (the built-in sinks) get every event in
the same order, but in batches: the frequent events (logged metrics, device samples, printed output)
wait in a queue until any other event comes or `BATCH_INTERVAL` has passed, so that the training
loop pays a list append, not a JSON line and a file write, per logged step. A batched callback may
define `end_batch()`, called after each batch it got (a file sink writes then). When no event comes
for a while (slow steps, validation) the bus's chore delivers a held batch (see `Housekeeping`:
the loop's `tick()`, or a thread once the loop is slow).
Must not import torch or textual.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Any
from collections.abc import Callable, Iterable

from .events import DevicesSampled, Event, HistogramLogged, MediaLogged, MetricsLogged, OutputPrinted, StepCompleted
from .housekeeping import Housekeeping

Callback = Callable[[Event, Any], None]

#: events that may wait for a batch; any other event delivers the queue at once, itself included
BATCHABLE = (MetricsLogged, DevicesSampled, OutputPrinted, MediaLogged, HistogramLogged)
#: seconds a batchable event may wait in the queue (checked whenever an event is emitted)
BATCH_INTERVAL = 0.25
#: seconds between the StepCompleted events that `steps="sampled"` callbacks get
STEP_SAMPLE_INTERVAL = 0.1
#: seconds a bus's delivery thread (when it has one) waits with nothing queued before it ends
TICKER_IDLE = 10.0


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

    def __init__(
        self,
        callbacks: Iterable[Callback] = (),
        batch_interval: float = BATCH_INTERVAL,
        housekeeping: Housekeeping | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock  # seconds; a test passes its own
        #: the run's periodic chores; emitting an event ticks it
        self.housekeeping = housekeeping if housekeeping is not None else Housekeeping()
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
        self._said: set[tuple[str, str]] = set()  # (callback, its error's last line) already said
        #: the first failed write of a callback that stores the run (`stores_run = True`: the run
        #: directory's files) as (one line, traceback); the loop stops on it (see `on_write_failure`)
        self.write_failure: tuple[str, str] | None = None
        #: called once, with that line, on the first such failure (the Learner stops at the next step)
        self.on_write_failure: list[Callable[[str], None]] = []
        self._wake = threading.Condition(self._lock)
        self._chore = False  # the chore that delivers batches no later event delivered: added
        self._ticker: threading.Thread | None = None  # that chore's thread
        self._ticker_idle = False
        self._closed = False
        self._end_batch: list[Callable[[], None]] = []
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
            end_batch = getattr(callback, "end_batch", None) if batched else None
            if end_batch is not None:
                self._end_batch.append(end_batch)
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
                queue, now = self._queue, self.clock()
                if not queue:
                    self._queued_at = now
                    if not self._chore:
                        self._chore = True
                        self.housekeeping.add(self.batch_interval, self._deliver_stale, self._start_ticker)
                    elif self._ticker_idle:
                        self._wake.notify()
                    elif self._ticker is None and not self.housekeeping.inline:
                        self._start_ticker()  # it ended, idle
                queue.append(event)
                if not isinstance(event, BATCHABLE) or now - self._queued_at >= self.batch_interval:
                    self.deliver()
            self.housekeeping.tick()

    def tick(self) -> None:
        """The loop comes by (a validation batch, a pause): chores that are due run now."""
        self.housekeeping.tick()

    def _deliver_stale(self) -> None:
        with self._lock:
            if self._queue and self.clock() - self._queued_at >= self.batch_interval:
                self.deliver()

    def _start_ticker(self) -> None:
        with self._lock:
            if self._closed or self._ticker is not None:
                return
            self._ticker = threading.Thread(target=self._ticker_loop, name="tuitrain-events", daemon=True)
            self._ticker.start()

    def _ticker_loop(self) -> None:
        # on a thread: a batch no later event delivered goes out at 2x the interval (the loop's
        # own emits deliver the others first); ends after TICKER_IDLE s with nothing queued (a bus
        # nobody closed leaves no thread behind), and the next queued event starts another
        with self._lock:
            while not self._closed:
                if not self._queue:
                    self._ticker_idle = True
                    self._wake.wait(TICKER_IDLE)
                    self._ticker_idle = False
                    if not self._queue:
                        break
                    continue
                due = self._queued_at + 2 * self.batch_interval - self.clock()
                if due > 0:
                    self._wake.wait(due)
                else:
                    self.deliver()
            self._ticker = None

    def deliver(self) -> None:
        """Hand the queued events to the batched callbacks now: each callback takes the whole batch,
        in order, before the next (its code and data stay in the CPU's caches)."""
        with self._lock:
            queue, self._queue = self._queue, []
            if not queue:
                return
            call = self._call
            for cb in self._batched:
                for event in queue:
                    call(cb, event)
            for end_batch in self._end_batch:
                try:
                    end_batch()
                except Exception:  # reported by the callback's next call, if it persists
                    pass

    def emit_step(self, event: Event) -> None:
        with self._lock:
            for cb in self._steps:
                self._call(cb, event)
            for cb in self._sampled:
                self._call(cb, event)
        self.housekeeping.tick()

    def _call(self, cb: Callback, event: Event) -> None:
        try:
            cb(event, self.state)
        except OSError as e:
            if getattr(cb, "stores_run", False):  # the run directory cannot be written: stop, say it once
                self._write_failed(cb, e)
            else:
                self._failed(cb, event)
        except Exception:  # a broken sink must not take training down; say so once per sink
            self._failed(cb, event)

    def _write_failed(self, cb: Callback, e: OSError) -> None:
        if self.write_failure is not None:
            return  # the first failure says it; the others (the same disk) stay quiet
        from .fsutil import write_fault

        where = getattr(cb, "path", None)  # the file it writes, or the folder of its files
        if not isinstance(where, (str, os.PathLike)):
            where = getattr(cb, "run_dir", None)
            where = where if isinstance(where, (str, os.PathLike)) else None
        line = write_fault(e, where)
        self.write_failure = (line, traceback.format_exc())
        for hook in self.on_write_failure:
            try:
                hook(line)
            except Exception:
                pass

    def _failed(self, cb: Callback, event: Event) -> None:
        """Said once per callback and error: a sink that fails on every event (a full disk of its own)
        is one message, not one per kind of event."""
        name = getattr(cb, "__qualname__", type(cb).__name__)
        trace = traceback.format_exc()
        said = (name, trace.rstrip().splitlines()[-1])
        if said in self._said:
            return
        self._said.add(said)
        msg = f"callback {name} failed on {event.name}:\n{trace}"
        self.errors.append(msg)
        if not isinstance(event, OutputPrinted):
            self.emit(OutputPrinted(text=msg.rstrip(), stream="tuitrain"))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            self.deliver()
            for cb in self._all + self._batched:
                close = getattr(cb, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:
                        pass


class StepSampler:
    """For callbacks subscribed with `steps="sampled"`: the first FIRST steps of a phase, then a
    StepCompleted every STEP_SAMPLE_INTERVAL seconds, each carrying the items of every step since the
    last one (a screen measures a phase's speed from a few steps, even when the phase is short).
    `of(bus, phase)` is None when no callback needs it."""

    FIRST = 3
    __slots__ = ("emit", "phase", "items", "due", "first", "held")

    def __init__(self, emit: Callable[[Event], None], phase: str) -> None:
        self.emit, self.phase = emit, phase
        self.items = 0
        self.due = 0.0
        self.first = self.FIRST
        self.held: tuple[int, int, int] | None = None  # the last step, when not reported

    @classmethod
    def of(cls, bus: EventBus, phase: str) -> StepSampler | None:
        return cls(bus.emit_step, phase) if bus.wants_sampled_steps else None

    def __call__(self, epoch: int, step: int, batch: int, items: int) -> None:
        self.items += items
        now = time.perf_counter()
        if now >= self.due or self.first:
            self.first = max(0, self.first - 1)
            self.due = now + STEP_SAMPLE_INTERVAL
            self.emit(StepCompleted(phase=self.phase, epoch=epoch, step=step, batch=batch, items=self.items))
            self.items = 0
            self.held = None
        else:
            self.held = (epoch, step, batch)

    def flush(self) -> None:
        """At the phase's end: report its last step when it was held back, so that a phase shorter
        than the interval is measured from its first steps to its last, not by its first steps alone
        (slower, after validation or a checkpoint)."""
        if self.held is not None:
            epoch, step, batch = self.held
            self.held = None
            self.emit(StepCompleted(phase=self.phase, epoch=epoch, step=step, batch=batch, items=self.items))
            self.items = 0
