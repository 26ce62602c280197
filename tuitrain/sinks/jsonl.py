"""`JsonlWriter`: the run's event stream, `events.jsonl`, one `Event.to_json()` line per persistent
event, which `tuitrain watch` follows live.

Lines are written whole (one write call carries only complete lines), at most `flush_interval`
(0.5 s) after the writer gets the event, at once for the events a watcher must see without delay,
and fsynced when the run ends. On an EventBus the writer gets the frequent events (logged metrics,
device samples) in batches (every 0.25 s) and writes each batch whole at its end (`end_batch`); the
run's writer (`background=False`) then starts no thread of its own. Beside it, `events.columns`
holds the numbers of the MetricsLogged lines in binary (see `columns`): `watch` reads them instead of
the JSON where they still match it.
Must not import torch or textual.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from tuitrain.core.events import (
    CheckpointDeleted,
    CheckpointFailed,
    CheckpointSaved,
    CheckpointStarted,
    ControlReceived,
    EpochCompleted,
    Event,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
)
from tuitrain.sinks.columns import ColumnsWriter

FILENAME = "events.jsonl"

# a watcher shows these at once; everything else may wait up to flush_interval
_FLUSH_NOW = (
    RunStarted,
    EpochCompleted,
    CheckpointStarted,
    CheckpointSaved,
    CheckpointDeleted,
    CheckpointFailed,
    ControlReceived,
    RunPaused,
    RunResumed,
    RunFinished,
    RunFailed,
)


class JsonlWriter:
    """Appends every persistent event to `run_dir/events.jsonl` (a resumed run appends)."""

    stores_run = True  # a failed write (a full disk) ends the run: see EventBus.on_write_failure
    step_events = False  # the EventBus spares it StepStarted/StepCompleted: it ignores them
    batch_events = True  # it may get the frequent events in batches (EventBus)

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        flush_interval: float = 0.5,
        background: bool = True,
        columns: bool = True,
    ) -> None:
        """`background`: a thread writes lines held back when no later call comes; False leaves
        them to `end_batch()` (an EventBus calls it after every batch), `flush()` or the next call.
        `columns`: also write events.columns."""
        self.path = Path(run_dir) / FILENAME
        self.flush_interval = flush_interval
        self.background = background
        self._file = open(self.path, "ab", buffering=0)
        self._cond = threading.Condition()
        self._pending: list[bytes] = []
        self._pending_events: list[Event] = []  # the event of each pending line (for the columns)
        self._last_flush = time.monotonic()
        self._flusher: threading.Thread | None = None
        self._flusher_idle = False  # waiting for a first pending line (not on a timer)
        self._closed = False
        self._error: OSError | None = None  # a failed background flush, raised on the next call
        self._mend_torn_tail()
        self._columns: ColumnsWriter | None = None
        if columns:
            self._columns = ColumnsWriter(run_dir, os.fstat(self._file.fileno()).st_size)

    def _mend_torn_tail(self) -> None:
        # a writer killed mid-line left no newline: end that line so ours parse on their own
        try:
            size = self.path.stat().st_size
            if size:
                with open(self.path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        self._write_all(b"\n")
        except OSError:
            pass

    def __call__(self, event: Event, state: object = None) -> None:
        if not event.persistent:
            return
        line = (event.to_json() + "\n").encode("utf-8")
        with self._cond:
            if self._closed:
                return
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            self._pending.append(line)
            self._pending_events.append(event)
            now = time.monotonic()
            if isinstance(event, _FLUSH_NOW) or now - self._last_flush >= self.flush_interval:
                self._flush_locked(now)
                if isinstance(event, (RunFinished, RunFailed)):
                    os.fsync(self._file.fileno())
            elif self.background:
                self._start_flusher()
                if self._flusher_idle:  # on a timer it finds the lines itself: no wake-up per line
                    self._cond.notify()

    def flush(self) -> None:
        with self._cond:
            if not self._closed:
                self._flush_locked(time.monotonic())

    def end_batch(self) -> None:
        """The EventBus delivered a batch: write its lines now (a failure is raised by the next call)."""
        with self._cond:
            if self._closed or not self._pending:
                return
            try:
                self._flush_locked(time.monotonic())
            except OSError as e:
                self._error, self._pending, self._pending_events = e, [], []

    def _flush_locked(self, now: float) -> None:
        if self._pending:
            lines, events, self._pending, self._pending_events = self._pending, self._pending_events, [], []
            try:
                self._write_all(b"".join(lines))
            except OSError:
                self._close_columns()  # where the lines ended is unknown now
                raise
            if self._columns is not None:
                self._columns.wrote(lines, events)
        self._last_flush = now

    def _close_columns(self) -> None:
        if self._columns is not None:
            self._columns.close()
            self._columns = None

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._file.write(view)
            view = view[n:]

    def _start_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_loop, name="tuitrain-jsonl", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        # writes lines left pending when no later event came to flush them
        with self._cond:
            while not self._closed:
                if not self._pending:
                    self._flusher_idle = True
                    self._cond.wait()
                    self._flusher_idle = False
                    continue
                due = self._last_flush + self.flush_interval - time.monotonic()
                if due > 0:
                    self._cond.wait(due)
                    continue
                try:
                    self._flush_locked(time.monotonic())
                except OSError as e:
                    self._error, self._pending, self._pending_events = e, [], []

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            try:
                self._flush_locked(time.monotonic())
                os.fsync(self._file.fileno())
            finally:
                self._closed = True
                self._cond.notify_all()
                self._file.close()
                self._close_columns()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=2)
