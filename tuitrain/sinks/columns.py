"""`events.columns`: the numbers of events.jsonl's MetricsLogged lines as binary columns, written
beside it by `JsonlWriter`, so `tuitrain watch` shows a long run without parsing its JSON.

events.jsonl stays the source of truth. A record names the byte range of events.jsonl its rows were
written to and that range's CRC-32; a reader uses a record only where events.jsonl still holds those
very bytes, and reads the JSON otherwise (no side file, a stale one, a torn or damaged record).

A record, little-endian: MAGIC; uint32 kind bytes, uint32 rows; int64 start and end (its lines' byte
range in events.jsonl); uint32 CRC-32 of those lines, of the payload, and of everything before it
with the kind; the kind, JSON {"split", "scope", "names"}; the payload: int64 columns step, epoch,
batch, batches, then float64 time, then one float64 column per name.
One record is a run of MetricsLogged lines in a row with the same split, scope and metric names, all
values finite numbers (any other line is left to the JSON). Must not import torch or textual.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from tuitrain.core.events import Event, MetricsLogged

FILENAME = "events.columns"
MAGIC = b"TTC1"
_HEAD = struct.Struct("<4sIIqqII")  # magic, kind bytes, rows, start, end, CRC-32 of the lines, of the payload
_CHECK = struct.Struct("<I")  # CRC-32 of the head and the kind
_INTS_ONLY, _NUMBERS, _STRS = frozenset({int}), frozenset({int, float}), frozenset({str})
_INT64 = (-(1 << 63) + 1, (1 << 63) - 1)  # the ints events.jsonl's fast reader takes
MAX_HEADER = 1 << 20

Key = tuple[str, str, tuple[str, ...]]  # a record's kind: split, scope, metric names
Row = tuple[float, ...]  # step, epoch, batch, batches, time, then the values


def _row(event: Any) -> tuple[Key, Row] | None:
    """(key, numbers) of a MetricsLogged the columns can hold exactly, else None (bools, NaN, strings,
    huge ints: the JSON's way)."""
    if type(event) is not MetricsLogged:
        return None
    metrics, t = event.metrics, event.time
    if type(metrics) is not dict or not metrics or type(event.split) is not str or type(event.scope) is not str:
        return None
    ints = (event.step, event.epoch, event.batch, event.batches)
    if not _INTS_ONLY.issuperset(map(type, ints)) or min(ints) < _INT64[0] or max(ints) > _INT64[1]:
        return None
    values = tuple(metrics.values())
    if (
        not _NUMBERS.issuperset(map(type, values))
        or type(t) not in _NUMBERS
        or not _STRS.issuperset(map(type, metrics))
    ):
        return None
    try:
        if not math.isfinite(sum(values, t)):  # NaN or infinity somewhere (or a sum too big: the JSON then)
            return None
    except OverflowError:
        return None
    return (event.split, event.scope, tuple(metrics)), ints + (float(t),) + values


def encode_record(start: int, chunk: bytes, key: Key, rows: list[Row]) -> bytes:
    """One record: `rows` (from `_row`) written as the lines `chunk` at byte `start` of events.jsonl."""
    split, scope, names = key
    kind = json.dumps({"split": split, "scope": scope, "names": list(names)}).encode("utf-8")
    n = len(rows)
    ints = np.array([r[:4] for r in rows], dtype="<i8").reshape(n, 4)
    floats = np.array([r[4:] for r in rows], dtype="<f8").reshape(n, 1 + len(names))
    payload = np.ascontiguousarray(ints.T).tobytes() + np.ascontiguousarray(floats.T).tobytes()
    head = _HEAD.pack(MAGIC, len(kind), n, start, start + len(chunk), zlib.crc32(chunk), zlib.crc32(payload))
    return head + _CHECK.pack(zlib.crc32(kind, zlib.crc32(head))) + kind + payload


class ColumnsWriter:
    """Appends records for the lines `JsonlWriter` writes; never fails the run (a failed write
    stops the side file, whose records so far stay valid)."""

    def __init__(self, run_dir: str | os.PathLike[str], jsonl_size: int) -> None:
        self.path = Path(run_dir) / FILENAME
        self.offset = jsonl_size  # where the next line goes in events.jsonl
        self._file: IO[bytes] | None = None
        try:
            self._file = open(self.path, "a+b", buffering=0)
            self._file.truncate(_good_prefix(self._file, jsonl_size))
        except OSError:
            self.close()

    def wrote(self, lines: list[bytes], events: list[Event]) -> None:
        """`lines` were appended to events.jsonl, in one piece; `events`: the event of each line."""
        if self._file is None:
            self.offset += sum(map(len, lines))
            return
        out: list[bytes] = []
        key: Key | None = None
        rows: list[Row] = []
        start, at = 0, self.offset
        parts: list[bytes] = []
        for line, event in zip(lines, events):
            row = _row(event)
            if rows and (row is None or row[0] != key):
                assert key is not None  # set with the first of `rows`
                out.append(encode_record(start, b"".join(parts), key, rows))
                rows, parts = [], []
            if row is not None:
                if not rows:
                    key, start = row[0], at
                rows.append(row[1])
                parts.append(line)
            at += len(line)
        if rows:
            assert key is not None  # set with the first of `rows`
            out.append(encode_record(start, b"".join(parts), key, rows))
        self.offset = at
        if out:
            try:
                self._file.write(b"".join(out))
            except OSError:
                self.close()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        self._file = None


def _good_prefix(f: IO[bytes], jsonl_size: int) -> int:
    """Bytes of the side file that are whole records of this events.jsonl: a torn last record goes,
    and a side file that names bytes events.jsonl does not have (another run's) goes whole."""
    f.seek(0)
    at, size = 0, os.fstat(f.fileno()).st_size
    while True:
        record = _read_record(f, at, {})
        if record is None or record.at + record.size > size:
            return at
        if record.end > jsonl_size:
            return 0
        at = record.at + record.size
        f.seek(at)


class Record(NamedTuple):
    start: int  # byte range of events.jsonl
    end: int
    crc: int  # of those bytes
    rows: int
    split: str
    scope: str
    names: tuple[str, ...]
    at: int  # where its payload is in the side file
    size: int  # payload bytes
    payload_crc: int


def _read_record(f: IO[bytes], at: int, kinds: dict[bytes, Key]) -> Record | None:
    """The record whose head is at `at` (the file positioned there), None when torn or damaged;
    `kinds` caches the kinds already read (they repeat)."""
    head = f.read(_HEAD.size + _CHECK.size)
    if len(head) < _HEAD.size + _CHECK.size:
        return None
    magic, klen, rows, start, end, crc, payload_crc = _HEAD.unpack_from(head)
    if magic != MAGIC or klen > MAX_HEADER:
        return None
    raw = f.read(klen)
    if len(raw) < klen or zlib.crc32(raw, zlib.crc32(head[: _HEAD.size])) != _CHECK.unpack_from(head, _HEAD.size)[0]:
        return None
    kind = kinds.get(raw)
    if kind is None:
        try:
            k = json.loads(raw)
            kind = (str(k["split"]), str(k["scope"]), tuple(k["names"]))
        except (ValueError, KeyError, TypeError):
            return None
        if not kind[2] or not all(isinstance(x, str) for x in kind[2]):
            return None
        kinds[raw] = kind
    if rows <= 0 or not 0 <= start < end:
        return None
    body = at + len(head) + klen
    split, scope, names = kind
    return Record(start, end, crc, rows, split, scope, names, body, 8 * rows * (5 + len(names)), payload_crc)


class ColumnsReader:
    """The records of a side file, read as it grows; `columns` gives a record's arrays. A damaged
    record ends the reading: what follows it is read from the JSON."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / FILENAME
        self._kinds: dict[bytes, Key] = {}
        self._pos = 0
        self._file: IO[bytes] | None = None
        self.broken = False

    def refresh(self) -> list[Record]:
        """The records written since the last call (none while the file is missing or broken)."""
        if self.broken:
            return []
        if self._file is None:
            try:
                self._file = open(self.path, "rb")
            except OSError:
                return []
        new: list[Record] = []
        f = self._file
        size = os.fstat(f.fileno()).st_size
        while self._pos + _HEAD.size + _CHECK.size <= size:
            f.seek(self._pos)
            record = _read_record(f, self._pos, self._kinds)
            if record is None or record.at + record.size > size:
                # a record still being written is whole on a later look; a damaged one stays as it is
                self.broken = record is None and size - self._pos > MAX_HEADER + _HEAD.size + _CHECK.size
                break
            new.append(record)
            self._pos = record.at + record.size
        return new

    def columns(self, record: Record) -> tuple[np.ndarray, np.ndarray] | None:
        """(ints, floats): int64 (4, rows) step/epoch/batch/batches, float64 (1 + names, rows) time
        and the values; None when the file cannot be read."""
        if self._file is None:
            return None
        try:
            data = os.pread(self._file.fileno(), record.size, record.at)
        except (OSError, AttributeError):
            return None
        if len(data) != record.size or zlib.crc32(data) != record.payload_crc:
            return None
        n = record.rows
        ints = np.frombuffer(data, "<i8", 4 * n).reshape(4, n)
        floats = np.frombuffer(data, "<f8", (1 + len(record.names)) * n, 32 * n).reshape(-1, n)
        return ints, floats

    def steps(self, record: Record) -> np.ndarray | None:
        """A record's steps alone (the payload's first row, unchecked: for an index; `columns` checks)."""
        if self._file is None:
            return None
        try:
            head = os.pread(self._file.fileno(), 8 * record.rows, record.at)
        except (OSError, AttributeError):
            return None
        return np.frombuffer(head, "<i8", record.rows) if len(head) == 8 * record.rows else None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
