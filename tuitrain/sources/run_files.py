"""Where the dashboard's events come from: a run directory's events.jsonl (`FileSource`), or a fixed list
(`ReplaySource`: tests); a run in this process is `LiveRun`'s (tuitrain/dashboard/live.py), another tool's
files a reader module's (refs.py, registry.py).

A source has `open(emit)` (called once, before any work: subscribe here), `work()` (blocking, run
in a thread worker; its return value is the exit code, or None) and `close()` (ask `work` to end).
`live` says whether the run behind it is still being trained.

`FileSource` hands consecutive MetricsLogged lines over as one `MetricsBlock` (columns, decoded with
msgspec when it is installed), not one event each: a run of a million logged steps is read in
seconds, and the model folds a block with numpy. Where the run directory's `events.columns` holds
those lines' numbers and events.jsonl still has the very bytes they came from (its CRC-32), the
block is read from there without parsing the JSON. Must not import textual.
"""

from __future__ import annotations

import itertools
import operator
import os
import threading
from collections import deque
from pathlib import Path
import time
from typing import Annotated, Any, Literal, Protocol
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tuitrain.core.events import MAX_LINE, DevicesSampled, Event, parse_line
from tuitrain.sinks.columns import ColumnsReader, Record
from tuitrain.sources.events_file import EVENTS_FILE, Tail, holds

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
_SAMPLE_PREFIX = b'{"event":"DevicesSampled",'  # as Event.to_json writes it


class Source(Protocol):
    live: bool

    def open(self, emit: Emit) -> None: ...
    def work(self) -> int | None: ...
    def close(self) -> None: ...


def _each(source: Any) -> list[Any]:
    readers = getattr(source, "readers", None)
    return list(readers.values()) if isinstance(readers, dict) else [source]


def skipped_lines(source: Any) -> int:
    """Lines of a watched run's events.jsonl (or the compared runs', or a resumed run's past sessions')
    left out as damaged: the notice counts them."""
    return sum(getattr(s, "bad_lines", 0) for s in _each(source))


def problems(source: Any) -> list[str]:
    """What the readers of another tool's files skipped as damaged (a source's `problems`, refs.py), one
    line each, the compared runs' together."""
    return [line for s in _each(source) for line in (getattr(s, "problems", None) or ())]


def problems_notice(source: Any) -> str:
    """`problems` as the notice's one line: the first, and how many more ("" when none)."""
    found = problems(source)
    if not found:
        return ""
    more = len(found) - 1
    return found[0] + (f" (and {more} more thing{'s' if more != 1 else ''} skipped)" if more else "")


class ReplaySource:
    """A fixed list of events, delivered at once (tests, snapshots).

    `work()` returns `exit_code` at once when `wait` is False; otherwise it blocks, like training
    does, until `finish()` or `close()`. `push(event)` adds events later, from any thread.
    """

    def __init__(
        self, events: Iterable[Event] = (), live: bool = True, exit_code: int | None = 0, wait: bool = True
    ) -> None:
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


class PastSessionsRead:
    """What a live run's source hands on once a resumed run's past sessions are read (LiveRun): the
    run goes on in this session, which is starting; the last session's end no longer stands."""

    persistent = True


class MetricsBlock:
    """Consecutive MetricsLogged lines of events.jsonl as columns: what `FileSource` hands on in
    their place, folded by `DashboardState` at once. `events()` gives the events themselves.

    `series`: {(split, scope, name): (steps, values)} as float arrays, names in the order they first
    came; `latest`: {"split/name": the newest value}; `train_steps`: the columns of the rows logged
    at a training step (step, time, epoch, batch, batches), for the x axes and the rates; `samples`:
    the device samples that came between its rows, each as (the rows before it, the event)."""

    __slots__ = (
        "_lines",
        "_raw",
        "_n",
        "series",
        "latest",
        "epoch",
        "max_step",
        "progress",
        "train_steps",
        "time",
        "samples",
    )
    persistent = True

    def __init__(self, lines: list[bytes], rows: list) -> None:
        self._lines, self._raw, self._n = lines, None, len(lines)
        self.samples: list[tuple[int, DevicesSampled]] = []
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
                self.train_steps = (
                    steps,
                    np.fromiter(map(_TIME, part), np.float64, n),
                    np.fromiter(map(_EPOCH, part), np.float64, n),
                    np.fromiter(map(_BATCH, part), np.float64, n),
                    np.fromiter(map(_BATCHES, part), np.float64, n),
                )
            known = [r for r in part if r.batches] if not part[-1].batches else part
            if known:
                self.progress[split] = (known[-1].batch, known[-1].batches)
            for name, xs, ys, at in _columns([r.metrics for r in part], steps, index):
                self.series[(split, scope, name)] = (xs, ys)
                key = f"{split}/{name}"
                if key not in newest or at > newest[key]:
                    newest[key], self.latest[key] = at, float(ys[-1])
        if len(kinds) > 1:  # the names in the order they came in the file (the chart grid's order)
            order = {
                name: i for i, name in enumerate(dict.fromkeys(itertools.chain.from_iterable(r.metrics for r in rows)))
            }
            self.series = dict(sorted(self.series.items(), key=lambda kv: order[kv[0][2]]))

    @classmethod
    def of_columns(cls, raw: bytes, record: Record, ints: np.ndarray, floats: np.ndarray) -> MetricsBlock:
        """The block of one events.columns record (its lines `raw`): what `__init__` makes of them."""
        self = cls.__new__(cls)
        self._lines, self._raw, self._n = None, raw, record.rows
        self.samples = []
        split, scope = record.split, record.scope
        steps = ints[0].astype(np.float64)
        self.epoch, self.time = int(ints[1, -1]), float(floats[0, -1])
        self.max_step = int(ints[0].max()) if scope == "step" or split == "train" else None
        self.train_steps = None
        if split == "train" and scope == "step":
            self.train_steps = (
                steps,
                floats[0],
                ints[1].astype(np.float64),
                ints[2].astype(np.float64),
                ints[3].astype(np.float64),
            )
        self.progress = {}
        known = np.flatnonzero(ints[3])
        if known.size:
            self.progress[split] = (int(ints[2, known[-1]]), int(ints[3, known[-1]]))
        self.series = {(split, scope, name): (steps, floats[1 + j]) for j, name in enumerate(record.names)}
        self.latest = {f"{split}/{name}": float(floats[1 + j, -1]) for j, name in enumerate(record.names)}
        return self

    @property
    def lines(self) -> list[bytes]:
        if self._lines is None:
            self._lines = bytes(self._raw).split(b"\n")[:-1]
        return self._lines

    def __len__(self) -> int:
        return self._n

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
    """Follows RUN_DIR/events.jsonl from its start, like `tail -f`, until closed; or, with `until`,
    reads its first `until` bytes and returns (a resumed run's past sessions, before this one writes)."""

    def __init__(
        self,
        run_dir: Path,
        live: bool = False,
        poll: float = 0.2,
        chunk: int = 1 << 23,
        blocks: bool = True,
        columns: bool = True,
        until: int | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / EVENTS_FILE
        self.live = live
        self.poll = poll
        self.chunk = chunk
        self.until = until  # bytes to read, then stop; None: follow the file
        self._stop = threading.Event()
        self._emit: Emit | None = None
        self.lines_read = 0
        self.bad_lines = 0
        self.caught_up = False  # read to the end of the file at least once
        self.ends_reached = 0  # times it read to the file's end: all written before a moment is read once this moves on
        # events read but not yet shown; the reader waits while there are many (set by the app)
        self.backlog: Callable[[], int] = lambda: 0
        self.blocks = blocks  # MetricsLogged lines in a row as one MetricsBlock (False: one event each)
        self.use_columns = columns and blocks  # blocks from events.columns where it matches (False: the JSON only)
        self._per_item = 1.0  # lines per item handed on, in the last chunk: how much a backlog item weighs
        self._columns: ColumnsReader | None = None  # events.columns, when blocks are on
        self._records: deque[Record] = deque()  # its records not yet reached, in file order
        self._awaiting: int | None = None  # the end of a record whose lines are not all read yet

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def work(self) -> int | None:
        assert self._emit is not None, "open() first"
        emit = self._emit
        tail = Tail(self.path, self.until)
        opened = 0  # the file's opening the columns reader began with
        want = self.chunk
        try:
            while not self._stop.is_set():
                got = tail.read(want)
                if got is None:
                    if self.until is not None:
                        break
                    self._stop.wait(self.poll)  # the run may not have written it yet
                    continue
                if tail.opens != opened:
                    opened = tail.opens
                    self._open_columns()
                if not got and self._awaiting is None:
                    if self.until is not None:  # read as far as asked
                        self.caught_up = True
                        break
                    if tail.cut_short():
                        continue
                    self.caught_up = True
                    self.ends_reached += 1
                    self._stop.wait(self.poll)
                    continue
                if not got:  # a record's lines never came whole (the file was cut): they go as JSON
                    self._records.popleft()
                cut = tail.whole()
                done = self._chunk(tail.data, cut, tail.pos, tail.handle, emit) if cut else 0
                if tail.take(done, hold=self._awaiting is not None):  # no line is this long: counted once
                    self.lines_read += 1
                    self.bad_lines += 1
                want = self.chunk
                if self._awaiting is not None:  # read on to a record's end
                    want = max(self.chunk, self._awaiting - tail.end)
                while self._behind() and not self._stop.is_set():
                    self._stop.wait(0.05)  # let the screen catch up: keys stay responsive, memory bounded
        finally:
            tail.close()
            if self._columns is not None:
                self._columns.close()
        return None

    def _open_columns(self) -> None:
        if self._columns is not None:
            self._columns.close()
        self._columns = ColumnsReader(self.run_dir) if self.use_columns else None
        self._records = deque()
        self._awaiting = None

    def _chunk(self, data: bytes, cut: int, pos: int, handle: Any, emit: Emit) -> int:
        """The whole lines data[:cut] (at byte `pos` of the file): records of events.columns that match
        them as blocks (records in a row of one kind as one block), the other lines as JSON. Returns
        the bytes handled: less than `cut` when a record's lines go on past it (`_awaiting` is then
        where they end)."""
        self._awaiting = None
        records, at, items, lines = self._records, 0, 0, 0
        group: list[tuple[Record, tuple]] = []  # matching records in a row, of one kind: one block
        samples: list[tuple[int, DevicesSampled]] = []  # device samples between the group's records
        if self._columns is not None and (not records or records[-1].end < pos + cut):
            size = os.fstat(handle.fileno()).st_size
            if self.until is not None:
                size = min(size, self.until)
            records.extend(r for r in self._columns.refresh() if pos <= r.start and r.end <= size)
        while records and records[0].start < pos + cut:
            record = records[0]
            s, e = record.start - pos, record.end - pos
            if s < at or (s and data[s - 1] != 10):  # lines already read, or not where a line begins
                records.popleft()
                continue
            if e > cut:
                self._awaiting = record.end
                break
            records.popleft()
            cols = self._matching(data, s, e, record)
            if cols is None:  # stale or damaged: those lines go as JSON
                continue
            if (
                group
                and s > at
                and group[0][0][4:7] == record[4:7]
                and record.split == "train"
                and record.scope == "step"
            ):
                between = self._samples_between(data[at:s], sum(r.rows for r, _ in group))
                if between is not None:  # only device samples between: the block goes on past them
                    samples.extend(between)
                    group.append((record, cols))
                    at = e
                    continue
            if group and (s > at or group[0][0][4:7] != record[4:7]):
                lines += self._emit_group(group, data, pos, emit, samples)
                items, group, samples = items + 1, [], []
            if s > at:
                part = data[at:s].split(b"\n")[:-1]
                items, lines = items + self._lines(part, emit), lines + len(part)
            group.append((record, cols))
            at = e
        if group:
            lines += self._emit_group(group, data, pos, emit, samples)
            items += 1
        end = cut if self._awaiting is None else records[0].start - pos
        part = data[at:end].split(b"\n")[:-1]
        items, lines = items + self._lines(part, emit), lines + len(part)
        self._per_item = max(1.0, lines / max(items, 1))
        return end

    def _matching(self, data: bytes, s: int, e: int, record: Record) -> tuple | None:
        """A record's columns, if data[s:e] are the very bytes it was written from."""
        if not holds(memoryview(data)[s:e], record):
            return None
        return self._columns.columns(record)

    @staticmethod
    def _samples_between(raw: bytes, row: int) -> list[tuple[int, DevicesSampled]] | None:
        """The lines between two records of training steps, if they are device samples and nothing else
        (a sampler's line every second or so would otherwise cut a long run into thousands of small
        blocks): each with the number of the block's rows before it. None: anything else is there."""
        found = []
        for line in raw.split(b"\n")[:-1]:
            if not line.startswith(_SAMPLE_PREFIX):
                return None
            event = parse_line(line)
            if not isinstance(event, DevicesSampled):
                return None
            found.append((row, event))
        return found

    def _emit_group(self, group: list, data: bytes, pos: int, emit: Emit, samples: Sequence = ()) -> int:
        first, last = group[0][0], group[-1][0]
        record = first._replace(end=last.end, rows=sum(r.rows for r, _ in group))
        if len(group) == 1:
            ints, floats = group[0][1]
        else:
            ints = np.concatenate([c[0] for _, c in group], axis=1)
            floats = np.concatenate([c[1] for _, c in group], axis=1)
        block = MetricsBlock.of_columns(memoryview(data)[first.start - pos : last.end - pos], record, ints, floats)
        if samples:
            block.samples = list(samples)
            block._n += len(samples)
        self.lines_read += len(block)
        emit(block, None)
        return len(block)

    def _behind(self) -> bool:
        """The screen has more waiting than the reader may run ahead (an item weighs its lines)."""
        waiting = self.backlog()
        return waiting > MAX_BACKLOG or waiting * self._per_item > MAX_BACKLOG_LINES

    def _lines(self, lines: list[bytes], emit: Emit) -> int:
        """Whole lines as JSON; returns the items handed on."""
        if not self.blocks or msgspec is None:
            for raw in lines:
                self._line(raw, emit)
            return len(lines)
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
        return items

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

    def close(self) -> None:
        self._stop.set()
