"""Where the dashboard's events come from: a run in this process, a run directory's events.jsonl,
or a fixed list (tests).

A source has `open(emit)` (called once, before any work: subscribe here), `work()` (blocking, run
in a thread worker; its return value is the exit code, or None) and `close()` (ask `work` to end).
`live` says whether the run behind it is still being trained. Must not import textual.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from tuitrain.core.events import MAX_LINE, Event, parse_line

Emit = Callable[[Event, Any], None]
MAX_BACKLOG = 20_000  # events a file reader may run ahead of the screen


class Source(Protocol):
    live: bool

    def open(self, emit: Emit) -> None: ...
    def work(self) -> int | None: ...
    def close(self) -> None: ...


class RunSource:
    """A run trained in this process: `run.subscribe(callback)` then `run.execute()`."""

    live = True

    def __init__(self, run: Any) -> None:
        self.run = run

    def open(self, emit: Emit) -> None:
        self.run.subscribe(emit)

    def work(self) -> int | None:
        return self.run.execute()

    def close(self) -> None:
        pass  # training stops through the interrupter, never by abandoning the thread


class ReplaySource:
    """A fixed list of events, delivered at once (tests, snapshots).

    `work()` returns `exit_code` at once when `wait` is False; otherwise it blocks, like training
    does, until `finish()` or `close()`. `push(event)` adds events later, from any thread.
    """

    def __init__(self, events: Iterable[Event] = (), live: bool = True, exit_code: int | None = 0,
                 wait: bool = True) -> None:
        self.events = list(events)
        self.live = live
        self.exit_code = exit_code
        self._done = threading.Event()
        if not wait:
            self._done.set()
        self._emit: Emit | None = None

    def open(self, emit: Emit) -> None:
        self._emit = emit
        for e in self.events:
            emit(e, None)

    def push(self, *events: Event) -> None:
        assert self._emit is not None, "open() first"
        for e in events:
            self._emit(e, None)

    def finish(self, exit_code: int | None = None) -> None:
        if exit_code is not None:
            self.exit_code = exit_code
        self._done.set()

    def work(self) -> int | None:
        self._done.wait()
        return self.exit_code

    def close(self) -> None:
        self._done.set()


class FileSource:
    """Follows RUN_DIR/events.jsonl from its start, like `tail -f`, until closed."""

    def __init__(self, run_dir: Path, live: bool = False, poll: float = 0.2, chunk: int = 1 << 18) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "events.jsonl"
        self.live = live
        self.poll = poll
        self.chunk = chunk
        self._stop = threading.Event()
        self._emit: Emit | None = None
        self.lines_read = 0
        self.bad_lines = 0
        self.caught_up = False  # read to the end of the file at least once
        # events read but not yet shown; the reader waits while there are many (set by the app)
        self.backlog: Callable[[], int] = lambda: 0

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def work(self) -> int | None:
        assert self._emit is not None, "open() first"
        emit = self._emit
        partial = b""
        skipping = False  # inside a line past MAX_LINE
        handle = None
        try:
            while not self._stop.is_set():
                if handle is None:
                    try:
                        handle = open(self.path, "rb")
                    except FileNotFoundError:
                        self._stop.wait(self.poll)  # the run may not have written it yet
                        continue
                data = handle.read(self.chunk)
                if not data:
                    if self._truncated(handle):
                        handle.close()
                        handle, partial, skipping = None, b"", False
                        continue
                    self.caught_up = True
                    self._stop.wait(self.poll)
                    continue
                data = partial + data
                lines = data.split(b"\n")
                partial = lines.pop()  # a line still being written has no newline yet
                if skipping and lines:  # the rest of a line too long to keep
                    lines.pop(0)
                    skipping = False
                for raw in lines:
                    self._line(raw, emit)
                if len(partial) > MAX_LINE:  # no line is this long: count it once, drop it to its end
                    if not skipping:
                        self.lines_read += 1
                        self.bad_lines += 1
                    partial, skipping = b"", True
                while self.backlog() > MAX_BACKLOG and not self._stop.is_set():
                    self._stop.wait(0.05)  # let the screen catch up: keys stay responsive, memory bounded
        finally:
            if handle is not None:
                handle.close()
        return None

    def _line(self, raw: bytes, emit: Emit) -> None:
        if not raw.strip():
            return
        self.lines_read += 1
        event = parse_line(raw)
        if event is None:
            self.bad_lines += 1  # unknown, damaged or ill-shaped line: skip it, count it, keep following
            return
        emit(event, None)

    def _truncated(self, handle: Any) -> bool:
        try:
            return os.fstat(handle.fileno()).st_size < handle.tell() or not self.path.exists()
        except OSError:
            return True

    def close(self) -> None:
        self._stop.set()
