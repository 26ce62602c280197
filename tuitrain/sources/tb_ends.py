"""A TensorBoard run's ends, read cheaply for `tuitrain ls` (tensorboard.summary): its start and its last
step, never its records between. Never imports textual."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tuitrain.sources import tfrecord
from tuitrain.sources.peek import wire_fields
from tuitrain.sources.refs import Summary

TAIL = 1 << 16  # bytes of the last file's end looked through for its last record


def summary(files: list[Path]) -> Summary:
    """The start of the run whose event files are `files` (in order): its first file's first event's
    wall_time; and its last step: the step of its last file's last record, found from the file's end (the
    one place whose length header, its CRC checked, says the record ends where the file does).
    TensorBoard records no run's end, nor epochs."""
    if not files:
        return {}
    out: Summary = {}
    try:
        with open(files[0], "rb") as f:
            buf = f.read(12)
            n = tfrecord.header_length(buf, 0)
            if n is not None and n < TAIL:
                wall = wire_fields(f.read(n)).get(1)
                if wall and isinstance(wall[0], bytes) and len(wall[0]) == 8:
                    out["started"] = float(np.frombuffer(wall[0], "<f8")[0])
        with open(files[-1], "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - TAIL))
            buf = f.read()
    except OSError:
        return out
    out["step"] = _last_step(buf)
    return out


def _last_step(buf: bytes) -> int | None:
    """The largest step of the whole records that end where `buf` does, one after another (walked back
    from the end: each one the place whose length header, its CRC checked, says it ends where the next
    begins); None when no record ends there. (The largest: a last record may be a stray early step.)"""
    if len(buf) < 16:
        return None
    a = np.frombuffer(buf, np.uint8).astype(np.int64)
    at = np.arange(len(buf) - 15)
    high = a[at + 4] | a[at + 5] | a[at + 6] | a[at + 7]
    at = at[high == 0]
    ends = at + 16 + (a[at] | a[at + 1] << 8 | a[at + 2] << 16 | a[at + 3] << 24)
    keep = ends <= len(buf)
    at, ends = at[keep], ends[keep]
    order = np.argsort(ends, kind="stable")
    at, ends = at[order], ends[order]
    top: int | None = None
    end = len(buf)
    while True:
        lo, hi = np.searchsorted(ends, end, "left"), np.searchsorted(ends, end, "right")
        for p in at[lo:hi].tolist()[::-1]:
            if tfrecord.header_length(buf, p) == end - p - 16:
                step = wire_fields(buf[p + 12 : end - 4]).get(2)
                got = int(step[0]) if step and isinstance(step[0], int) else 0  # step 0 is not written
                top = got if top is None else max(top, got)
                end = p
                break
        else:
            return top
