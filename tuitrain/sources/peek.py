"""A log's ends, read cheaply for `tuitrain ls` (the readers' `summary`, refs.py): a file's last whole line
by seeking from its end (the last step of a log of a million rows without reading the rows), its first
line, and protobuf's wire format read field by field (a W&B record, a TensorBoard event) without the
message classes. Never imports textual."""

from __future__ import annotations

import os
from typing import Any

CHUNK = 4096  # bytes read back at a time
LIMIT = 1 << 20  # a last line longer than this is not looked for


def last_line(path: str | os.PathLike[str], limit: int = LIMIT) -> bytes:
    """The file's last line that ends with a newline (a cut last line, still being written, left out),
    without its newline; b"" when there is none within `limit` bytes of the end, or the file is unreadable."""
    try:
        with open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            data = b""
            at = end
            while at > 0 and end - at < limit:
                step = min(CHUNK, at)
                at -= step
                f.seek(at)
                data = f.read(step) + data
                cut = data.rfind(b"\n")
                if cut < 0:
                    continue
                start = data.rfind(b"\n", 0, cut)
                if start >= 0 or at == 0:
                    return data[start + 1 : cut].rstrip(b"\r")
    except OSError:
        return b""
    return b""


def first_line(path: str | os.PathLike[str], limit: int = 65536) -> bytes:
    """The file's first line (its header), without its newline; b"" when unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(limit)
    except OSError:
        return b""
    return head.split(b"\n", 1)[0].rstrip(b"\r")


def wire_fields(data: bytes) -> dict[int, list[Any]]:
    """A protobuf message's fields by number: a varint as an int, a length-delimited field as its bytes, a
    fixed one as its bytes; {} when the bytes are not a message."""
    out: dict[int, list[Any]] = {}
    at, end = 0, len(data)
    try:
        while at < end:
            tag, at = _varint(data, at)
            number, kind = tag >> 3, tag & 7
            value: Any
            if kind == 0:
                value, at = _varint(data, at)
            elif kind == 2:
                n, at = _varint(data, at)
                value, at = data[at : at + n], at + n
            elif kind in (1, 5):
                n = 8 if kind == 1 else 4
                value, at = data[at : at + n], at + n
            else:
                return {}
            if at > end or number == 0:
                return {}
            out.setdefault(number, []).append(value)
    except IndexError:
        return {}
    return out


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise IndexError(at)


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
