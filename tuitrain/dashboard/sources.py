"""Where the dashboard's events come from: a run in this process, a run directory's events.jsonl,
or a fixed list (tests).

A source has `open(emit)` (called once, before any work: subscribe here), `work()` (blocking, run
in a thread worker; its return value is the exit code, or None) and `close()` (ask `work` to end).
`live` says whether the run behind it is still being trained.

`FileSource` hands consecutive MetricsLogged lines over as one `MetricsBlock` (columns, decoded with
msgspec when it is installed), not one event each: a run of a million logged steps is read in
seconds, and the model folds a block with numpy. Must not import textual.
"""

from __future__ import annotations

import itertools
import operator
import os
import threading
from pathlib import Path
import time
from typing import Annotated, Any, Callable, Iterable, Literal, Protocol

import numpy as np

from tuitrain.core.events import MAX_LINE, Event, MetricsLogged, parse_line

try:  # a typed JSON decoder: MetricsLogged lines at about 1 µs each (the json module and events: ~25 µs)
    import msgspec
except ImportError:  # pragma: no cover - a dependency; without it every line takes the general path
    msgspec = None

Emit = Callable[[Event, Any], None]
MAX_BACKLOG = 20_000  # events a file reader may run ahead of the screen
# logged lines it may run ahead in MetricsBlocks (~300 bytes each): the screen folds a block in about
# a millisecond, and takes what waits 15 times a second, so this much keeps the reader going
MAX_BACKLOG_LINES = 200_000
METRICS_PREFIX = b'{"event":"MetricsLogged",'  # how JsonlWriter begins every such line
_IS_METRICS = operator.methodcaller("startswith", METRICS_PREFIX)


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


class MetricsBlock:
    """Consecutive MetricsLogged lines of events.jsonl as columns: what `FileSource` hands on in
    their place, folded by `DashboardState` at once. `events()` gives the events themselves.

    `series`: {(split, scope, name): (steps, values)} as float arrays, names in the order they first
    came; `latest`: {"split/name": the newest value}; `train_steps`: the columns of the rows logged
    at a training step (step, time, epoch, batch, batches), for the x axes and the rates."""

    __slots__ = ("lines", "series", "latest", "epoch", "max_step", "progress", "train_steps", "time")
    persistent = True

    def __init__(self, lines: list[bytes], rows: list) -> None:
        self.lines = lines
        last = rows[-1]
        self.epoch, self.time = last.epoch, last.time
        self.series: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}
        self.latest: dict[str, float] = {}
        self.progress: dict[str, tuple[int, int]] = {}  # split -> (batch, batches) of its newest row that knows them
        self.max_step: int | None = None
        self.train_steps: tuple[np.ndarray, ...] | None = None
        newest: dict[str, int] = {}  # "split/name" -> the row index its latest value came from
        kinds = set(map(_SPLIT_SCOPE, rows))
        for split, scope in sorted(kinds, key=lambda k: k != (last.split, last.scope)):
            if len(kinds) == 1:
                part, index = rows, np.arange(len(rows))
            else:
                index = np.array([i for i, r in enumerate(rows) if r.split == split and r.scope == scope])
                part = [rows[i] for i in index]
            n = len(part)
            steps = np.fromiter(map(_STEP, part), np.float64, n)
            if scope == "step" or split == "train":
                top = int(steps.max())
                self.max_step = top if self.max_step is None else max(self.max_step, top)
            if split == "train" and scope == "step":
                self.train_steps = (steps, np.fromiter(map(_TIME, part), np.float64, n),
                                    np.fromiter(map(_EPOCH, part), np.float64, n),
                                    np.fromiter(map(_BATCH, part), np.float64, n),
                                    np.fromiter(map(_BATCHES, part), np.float64, n))
            known = [r for r in part if r.batches] if not part[-1].batches else part
            if known:
                self.progress[split] = (known[-1].batch, known[-1].batches)
            for name, xs, ys, at in _columns([r.metrics for r in part], steps, index):
                self.series[(split, scope, name)] = (xs, ys)
                key = f"{split}/{name}"
                if key not in newest or at > newest[key]:
                    newest[key], self.latest[key] = at, float(ys[-1])
        if len(kinds) > 1:  # the names in the order they came in the file (the chart grid's order)
            order = {name: i for i, name in enumerate(dict.fromkeys(
                itertools.chain.from_iterable(r.metrics for r in rows)))}
            self.series = dict(sorted(self.series.items(), key=lambda kv: order[kv[0][2]]))

    def __len__(self) -> int:
        return len(self.lines)

    def events(self) -> list[Event]:
        return [e for e in map(parse_line, self.lines) if e is not None]


_SPLIT_SCOPE = operator.attrgetter("split", "scope")
_STEP, _TIME, _EPOCH = operator.attrgetter("step"), operator.attrgetter("time"), operator.attrgetter("epoch")
_BATCH, _BATCHES = operator.attrgetter("batch"), operator.attrgetter("batches")


def _columns(metrics: list[dict], steps: np.ndarray, index: np.ndarray):
    """(name, steps, values, row index of the newest value) of each metric name, in the order they came."""
    first = metrics[0]
    names = list(first)
    n, k = len(metrics), len(names)
    if k and sum(map(len, metrics)) == n * k:  # the common case: every row has the same names
        try:
            got = map(operator.itemgetter(*names), metrics) if k > 1 else ((m[names[0]],) for m in metrics)
            table = np.fromiter(itertools.chain.from_iterable(got), np.float64, n * k).reshape(n, k)
        except KeyError:
            table = None
        if table is not None:
            return [(name, steps, table[:, j], int(index[-1])) for j, name in enumerate(names)]
    out = []
    nan = float("nan")  # a name missing from a row (the decoder lets no NaN through)
    for name in dict.fromkeys(itertools.chain.from_iterable(metrics)):
        ys = np.fromiter([m.get(name, nan) for m in metrics], np.float64, n)
        there = ~np.isnan(ys)
        out.append((name, steps[there], ys[there], int(index[there][-1])))
    return out


if msgspec is not None:
    _INT64 = msgspec.Meta(ge=-(1 << 63) + 1, le=(1 << 63) - 1)  # what events.from_dict takes as an int

    class _LoggedRow(msgspec.Struct, gc=False):
        """A MetricsLogged line as the fast path reads it (no metric value but a number: others go the
        general way); the cyclic GC need not track these short-lived rows."""

        event: Literal["MetricsLogged"]
        split: str
        epoch: Annotated[int, _INT64]
        step: Annotated[int, _INT64]
        metrics: dict[str, float]
        scope: str = "step"
        batch: Annotated[int, _INT64] = 0
        batches: Annotated[int, _INT64] = 0
        time: float = msgspec.field(default_factory=time.time)

    _decode_rows = msgspec.json.Decoder(list[_LoggedRow]).decode
    _decode_row = msgspec.json.Decoder(_LoggedRow).decode


def decode_metrics(lines: list[bytes]) -> list | None:
    """The rows of MetricsLogged lines, all of them, or None when one of them needs the general
    path (damaged, a value that is not a number, NaN, not MetricsLogged after all)."""
    if msgspec is None or not lines:
        return None
    try:
        rows = _decode_rows(b"[" + b",".join(lines) + b"]")
    except (msgspec.DecodeError, RecursionError):
        return None
    return rows


class FileSource:
    """Follows RUN_DIR/events.jsonl from its start, like `tail -f`, until closed."""

    def __init__(self, run_dir: Path, live: bool = False, poll: float = 0.2, chunk: int = 1 << 21,
                 blocks: bool = True) -> None:
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
        self.blocks = blocks  # MetricsLogged lines in a row as one MetricsBlock (False: one event each)
        self._per_item = 1.0  # lines per item handed on, in the last chunk: how much a backlog item weighs

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
                self._lines(lines, emit)
                if len(partial) > MAX_LINE:  # no line is this long: count it once, drop it to its end
                    if not skipping:
                        self.lines_read += 1
                        self.bad_lines += 1
                    partial, skipping = b"", True
                while self._behind() and not self._stop.is_set():
                    self._stop.wait(0.05)  # let the screen catch up: keys stay responsive, memory bounded
        finally:
            if handle is not None:
                handle.close()
        return None

    def _behind(self) -> bool:
        """The screen has more waiting than the reader may run ahead (an item weighs its lines)."""
        waiting = self.backlog()
        return waiting > MAX_BACKLOG or waiting * self._per_item > MAX_BACKLOG_LINES

    def _lines(self, lines: list[bytes], emit: Emit) -> None:
        if not self.blocks or msgspec is None:
            for raw in lines:
                self._line(raw, emit)
            return
        items, at = 0, 0
        # the lines that are not MetricsLogged, found without a Python step per line
        others = np.flatnonzero(~np.fromiter(map(_IS_METRICS, lines), bool, len(lines))).tolist()
        for i in others + [len(lines)]:
            if i > at:  # MetricsLogged lines in a row
                items += self._metrics(lines[at:i], emit)
            if i < len(lines):
                self._line(lines[i], emit)
                items += 1
            at = i + 1
        self._per_item = max(1.0, len(lines) / max(items, 1))

    def _metrics(self, run: list[bytes], emit: Emit) -> int:
        """MetricsLogged lines in a row: as blocks, each line the fast path cannot take on its own way."""
        rows = decode_metrics(run) if max(map(len, run)) <= MAX_LINE else None
        if rows is not None:
            self.lines_read += len(run)
            emit(MetricsBlock(run, rows), None)
            return 1
        items, kept, good = 0, [], []
        for raw in run:  # one line at a time: the lines that decode go on in blocks, the others alone
            row = None
            if len(raw) <= MAX_LINE:
                try:
                    row = _decode_row(raw)
                except (msgspec.DecodeError, RecursionError):
                    row = None
            if row is not None:
                kept.append(raw)
                good.append(row)
                continue
            if good:
                self.lines_read += len(kept)
                emit(MetricsBlock(kept, good), None)
                items, kept, good = items + 1, [], []
            self._line(raw, emit)
            items += 1
        if good:
            self.lines_read += len(kept)
            emit(MetricsBlock(kept, good), None)
            items += 1
        return items

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
