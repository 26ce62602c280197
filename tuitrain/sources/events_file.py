"""A run's events.jsonl read back: `Tail`, the one reader of its bytes as the file grows, and `holds`, whether
the file still has the very bytes a record of events.columns was written from.

`FileSource` (what `tuitrain watch` shows), a sweep following its trials' metrics (tuitrain/run/sweep.py)
and `StepLookup` (the inspect readout's exact values) all read the file through here: whole lines from
where the last read ended, a line still being written left for the next read, a line longer than any
event (`MAX_LINE`) dropped to its end and counted once, a file cut shorter or replaced read again from
its start. Must not import textual.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tuitrain.core.events import MAX_LINE
from tuitrain.sinks.columns import Record

EVENTS_FILE = "events.jsonl"


class Tail:
    """`path` read as it grows, like `tail -f`, without waiting itself (the caller polls).

    `read(want)` adds up to `want` new bytes to `data` (which begins at byte `pos` of the file);
    `whole()` is where its whole lines end; `take(n)` drops the first `n` bytes once handled. With
    `until`, no byte past it is read (a resumed run's past sessions, before this one writes)."""

    def __init__(self, path: str | os.PathLike[str], until: int | None = None) -> None:
        self.path = Path(path)
        self.until = until
        self.handle: BinaryIO | None = None
        self.data = b""  # read, not yet taken
        self.pos = 0  # where `data` begins in the file
        self.skipping = False  # inside a line past MAX_LINE, dropped to its end
        self.opens = 0  # times the file was opened (a reader of events.columns begins again with it)

    @property
    def end(self) -> int:
        """Where the next read starts."""
        return self.pos + len(self.data)

    def read(self, want: int) -> int | None:
        """Up to `want` more bytes onto `data` (none past `until`): how many were read (0: none new); None
        while the file is not there."""
        if self.handle is None:
            try:
                self.handle = open(self.path, "rb")
            except FileNotFoundError:
                return None
            self.opens += 1
        if self.until is not None:
            want = max(0, min(want, self.until - self.handle.tell()))
        new = self.handle.read(want) if want else b""
        if new:
            self.data += new
            if self.skipping:  # the rest of a line too long to keep
                nl = self.data.find(b"\n")
                if nl >= 0:
                    self.data, self.pos, self.skipping = self.data[nl + 1 :], self.pos + nl + 1, False
        return len(new)

    def whole(self) -> int:
        """Where the whole lines of `data` end (a line still being written has no newline yet)."""
        return self.data.rfind(b"\n") + 1

    def take(self, n: int, hold: bool = False) -> bool:
        """The first `n` bytes of `data` handled. What is left, when longer than any line (MAX_LINE) and
        not held (`hold`: the caller reads on to a known end), is dropped to its line's end; True when
        such a line begins (count it once)."""
        self.data, self.pos = self.data[n:], self.pos + n
        if hold or len(self.data) <= MAX_LINE:
            return False
        began = not self.skipping
        self.data, self.pos, self.skipping = b"", self.pos + len(self.data), True
        return began

    def lines(self, chunk: int = 1 << 20) -> Iterator[bytes]:
        """Every whole line the file has gained since the last call (an overlong one left out)."""
        while self.read(chunk):
            cut = self.whole()
            if cut:
                yield from self.data[:cut].split(b"\n")[:-1]
            self.take(cut)

    def cut_short(self) -> bool:
        """Whether the file is now shorter than what was read, or gone (replaced): then it is read again
        from its start."""
        if self.handle is None:
            return False
        try:
            gone = os.fstat(self.handle.fileno()).st_size < self.handle.tell() or not self.path.exists()
        except OSError:
            gone = True
        if gone:
            self.close()
            self.data, self.pos, self.skipping = b"", 0, False
        return gone

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def holds(raw: bytes | memoryview, record: Record) -> bool:
    """Whether `raw` (events.jsonl's bytes from `record.start`) are the very lines `record` was written
    from: all of them, ending a line, with its CRC-32. A record is believed only then."""
    return len(raw) == record.end - record.start and raw[-1:] == b"\n" and zlib.crc32(raw) == record.crc


def record_lines(run_dir: str | os.PathLike[str], record: Record) -> bytes | None:
    """RUN_DIR/events.jsonl's lines of `record`, if the file still holds them (`holds`); None otherwise."""
    try:
        with open(Path(run_dir) / EVENTS_FILE, "rb") as f:
            raw = os.pread(f.fileno(), record.end - record.start, record.start)
    except OSError:
        return None
    return raw if holds(raw, record) else None


__all__ = ["EVENTS_FILE", "Tail", "holds", "record_lines"]
