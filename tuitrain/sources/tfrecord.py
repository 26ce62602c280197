"""TFRecord framing and the common scalar record of TensorBoard event files, read with numpy.

A TFRecord is `u64 length`, `u32 masked CRC32C of those 8 bytes`, `length bytes of data` (one `Event`
protobuf), `u32 masked CRC32C of the data`. A Python loop over a million records costs about a second;
here the records are found without one (`frame`): every Event begins with its `wall_time` field (tag
byte 0x09, the first data byte) and a length under 2**32 has four zero bytes, so the places where a
record may begin are found with one pass of numpy over the bytes, each such place's length is read and
its header CRC checked at once (a table-driven CRC32C over all rows together, `crc_rows`), and the
chain of records followed with array lookups: a Python step only where the chain does not go on to the next
place found (damage, a record of an unusual shape).

`read_records` checks the data CRC of every record: records of up to `TABLE_MAX` bytes by the same
table method, one numpy step per pair of byte positions over all records of a length, the longer
(pictures, histograms: few) with a C CRC32C (`google-crc32c` or `crc32c`) where one is installed. That is
cheap enough to do always (docs/formats/tensorboard.md has the figures): a flipped bit anywhere is
caught, not only one that makes a value absurd. It also decodes the records that are exactly what
`SummaryWriter.add_scalar` and tensorboardX write (`wall_time`, `step`, one `Summary.Value` of a tag
and a float `simple_value`) straight from their bytes, the records of one length as one byte array;
every other record is left to protobuf (tb_summary.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import overload

import numpy as np
from numpy.lib.stride_tricks import as_strided

try:  # a C CRC32C for the long records (pictures); without one they go through the numpy tables
    from google_crc32c import value as _c_crc32c
except ImportError:  # pragma: no cover - depends on the extra
    try:
        from crc32c import crc32c as _c_crc32c
    except ImportError:
        _c_crc32c = None

MASK_DELTA = 0xA282EAD8
TABLE_MAX = 512  # records up to this long are checked with the per-position tables, all of a length at once
Group = tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]  # record indices, steps, walls, values, tag rows
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def _base_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)
    return table


_TABLE = _base_table()
_tables: dict[int, tuple[np.ndarray, int]] = {}


def _py_crc32c(data: bytes | memoryview) -> int:
    """CRC32C in Python and numpy: the byte loop over the table (only where no C one is installed)."""
    crc = 0xFFFFFFFF
    table = _TABLE.tolist()
    for b in bytes(data):
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


def crc32c(data: bytes | memoryview) -> int:
    if _c_crc32c is not None:
        crc: int = _c_crc32c(bytes(data))  # google_crc32c's or crc32c's: an int
        return crc
    if len(data) <= TABLE_MAX:
        return int(crc_rows(np.frombuffer(bytes(data), np.uint8).reshape(1, -1))[0])
    return _py_crc32c(data)


@overload
def masked(crc: int) -> int: ...
@overload
def masked(crc: np.ndarray) -> np.ndarray: ...
def masked(crc: int | np.ndarray) -> int | np.ndarray:
    """TFRecord's masked CRC: rotated right by 15 bits, plus a constant."""
    if isinstance(crc, np.ndarray):
        c = crc.astype(np.uint32)
        return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(MASK_DELTA)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def _tables_for(length: int) -> tuple[np.ndarray, int]:
    """For messages of `length` bytes: T[j][b], what byte b at position j adds to the CRC (init 0, no
    final xor), and the CRC of `length` zero bytes; CRC32C(x) = zeros ^ XOR_j T[j][x_j] (a CRC is affine)."""
    got = _tables.get(length)
    if got is None:
        t = np.empty((length, 256), np.uint32)
        t[length - 1] = _TABLE
        for j in range(length - 2, -1, -1):  # one more zero byte after it: the register moves on by one
            nxt = t[j + 1]
            t[j] = (nxt >> np.uint32(8)) ^ _TABLE[nxt & np.uint32(0xFF)]
        zeros = _py_crc32c(bytes(length)) if _c_crc32c is None else _c_crc32c(bytes(length))
        got = _tables[length] = (t, zeros)
    return got


def crc_rows(rows: np.ndarray, length: int | None = None) -> np.ndarray:
    """The CRC32C of each row of an (n, L) uint8 array (of its first `length` columns): one numpy step
    per two columns (a table of 65,536 entries per pair of positions)."""
    n = rows.shape[0]
    length = rows.shape[1] if length is None else length
    t, zeros = _tables_for(length)
    acc = np.full(n, zeros, np.uint32)
    pairs = length // 2
    if pairs:
        t2 = _pair_tables(length, t)
        if rows.flags.c_contiguous and rows.shape[1] % 2 == 0:
            wide = rows.view("<u2")  # no copy: the pairs of each row in place
        else:
            wide = np.ascontiguousarray(rows[:, : 2 * pairs]).view("<u2")
        for j in range(pairs):
            acc ^= t2[j][wide[:, j]]
    if length % 2:
        acc ^= t[length - 1][rows[:, length - 1]]
    return acc


_pairs: dict[int, np.ndarray] = {}


def _pair_tables(length: int, t: np.ndarray) -> np.ndarray:
    got = _pairs.get(length)
    if got is None:
        pairs = length // 2  # index b0 | b1 << 8 (little-endian u16): T[2j][b0] ^ T[2j+1][b1]
        got = (t[1 : 2 * pairs : 2][:, :, None] ^ t[0 : 2 * pairs : 2][:, None, :]).reshape(pairs, 65536)
        if len(_pairs) > 64:
            _pairs.clear()
        _pairs[length] = got
    return got


def gather(a: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The (n, width) bytes of `a` from each offset in `at` (a copy of rows of a sliding window)."""
    if not width:
        return np.zeros((at.size, 0), np.uint8)
    window: np.ndarray = as_strided(
        a, shape=(a.size - width + 1, width), strides=(a.strides[0], a.strides[0]), writeable=False
    )
    rows: np.ndarray = window[at]
    return rows


@dataclass
class Framing:
    """The whole records of buf[start:end]: each one's start (its header's first byte) and data length."""

    starts: np.ndarray
    lengths: np.ndarray
    stop: int  # where the next read begins: the end, or the start of a record not all there yet
    torn: int | None = None  # the start of a record that goes past the end (a writer still at it, or cut)
    damage: list[tuple[int, int]] = field(default_factory=list)  # (from, to) byte ranges skipped as damaged


def header_length(buf: bytes, p: int, end: int | None = None) -> int | None:
    """The data length of a record at p whose header checks, else None."""
    end = len(buf) if end is None else end
    if p + 12 > end:
        return None
    (n,) = _U64.unpack_from(buf, p)
    (c,) = _U32.unpack_from(buf, p + 8)
    return n if masked(crc32c(buf[p : p + 8])) == c else None


def frame(buf: bytes, start: int = 0, end: int | None = None) -> Framing:
    """The records of buf[start:end] (see the module's docstring)."""
    end = len(buf) if end is None else end
    a = np.frombuffer(buf, np.uint8, count=end)
    empty = np.empty(0, np.int64)
    if end - start < 12:
        return Framing(empty, empty, start, torn=start if end > start else None)
    cand = start + np.flatnonzero(a[start + 12 : end] == 9)
    head = np.empty((0, 12), np.uint8)
    if cand.size:
        head = gather(a, cand, 12)
        small = ~head[:, 4:8].any(axis=1)
        cand, head = cand[small], head[small]
        good = masked(crc_rows(head, 8)) == head[:, 8:12].copy().view("<u4").ravel()
        cand, head = cand[good], head[good]
    lengths_all = np.ascontiguousarray(head[:, :8]).view("<u8").ravel().astype(np.int64) if cand.size else empty
    nxt = cand + lengths_all + 16
    n = cand.size
    # where the chain does not simply go on to the next place found: a Python step each
    breaks = np.append(np.flatnonzero(nxt[:-1] != cand[1:]), n - 1) if n else np.empty(0, np.int64)
    pieces: list[np.ndarray] = []  # candidate indices on the chain
    extra: list[tuple[int, int]] = []  # (start, length) of records found by a Python step
    out = Framing(empty, empty, end)
    pos = start
    while True:  # pos: where a record should begin
        i = int(np.searchsorted(cand, pos))
        if i < n and cand[i] == pos:
            b = int(breaks[np.searchsorted(breaks, i)])  # the chain goes on from i to b
            q = int(nxt[b])
            j = int(np.searchsorted(cand, q))
            if j < n and cand[j] == q and j > b + 1:  # places found inside a record skipped (by chance, a header)
                pieces.append(np.arange(i, b + 1))
                pos = q
                continue
            if q > end:  # the last record is not all there
                pieces.append(np.arange(i, b))
                out.stop = out.torn = int(cand[b])
                break
            pieces.append(np.arange(i, b + 1))
            pos = q
            continue
        if pos >= end:
            out.stop = end
            break
        length = header_length(buf, pos, end)
        if length is not None:  # a record of a shape the candidates missed (no wall_time first, say)
            if pos + length + 16 > end:
                out.stop = out.torn = pos
                break
            extra.append((pos, length))
            pos += length + 16
            continue
        if end - pos < 12 or (i >= n and _tail_is_partial(a, pos, end)):
            out.stop = out.torn = pos  # a header not all there yet
            break
        resume = int(cand[i]) if i < n else end
        out.damage.append((pos, resume))
        pos = resume
    idx = np.concatenate(pieces) if pieces else empty
    starts, lengths = cand[idx], lengths_all[idx]
    if extra:
        starts = np.concatenate([starts, np.array([s for s, _ in extra], np.int64)])
        lengths = np.concatenate([lengths, np.array([n for _, n in extra], np.int64)])
        order = np.argsort(starts, kind="stable")
        starts, lengths = starts[order], lengths[order]
    out.starts, out.lengths = starts, lengths
    return out


def _tail_is_partial(a: np.ndarray, pos: int, end: int) -> bool:
    """Whether the bytes from pos to the end could be the beginning of a record still being written:
    a header whose length bytes look like one (high bytes zero) and whose data starts with wall_time."""
    rest = a[pos:end]
    if rest.size < 12:
        return True
    return not rest[4:8].any() and (rest.size == 12 or rest[12] == 9)


@dataclass
class Records:
    """What `read_records` found in some records: `good`, whether each one's data matches its CRC; the
    plain scalar records among the good ones (`which`: their indices), each with its step, wall time,
    value and tag (`tags[tag_ids[k]]`), grouped by the records' lengths (in the records' order within a
    length: `which` says where each came; sorting a million of them again costs ~0.1 s)."""

    good: np.ndarray
    which: np.ndarray
    steps: np.ndarray
    walls: np.ndarray
    values: np.ndarray
    tag_ids: np.ndarray
    tags: list[bytes]


def read_records(buf: bytes, starts: np.ndarray, lengths: np.ndarray, verify: bool = True) -> Records:
    """Each record's data CRC checked (`verify`), and the records that are one `simple_value` scalar
    each, as add_scalar writes them (`09 wall(8) [10 step(varint)] 2a L1 0a L2 0a Lt tag 15 value(4)`),
    decoded: the records of one length at a time, their bytes and CRC as one (n, length + 4) array."""
    a = np.frombuffer(buf, np.uint8)
    good = np.ones(starts.size, bool)
    found: list[Group] = []  # (record indices, steps, walls, values, tag rows) of a group
    small = lengths <= TABLE_MAX
    counts = np.bincount(lengths[small]) if small.any() else np.empty(0, np.int64)
    for length in map(int, np.flatnonzero(counts)):
        idx = np.flatnonzero(lengths == length) if counts[length] < starts.size else np.arange(starts.size)
        rows = gather(a, starts[idx] + 12, length + 4)
        if verify:
            want = np.ascontiguousarray(rows[:, length:]).view("<u4").ravel()
            ok = masked(crc_rows(rows, length)) == want
            good[idx] = ok
        else:
            ok = np.ones(idx.size, bool)
        if 20 <= length < 140:
            found.extend(_scalar_rows(rows, idx, ok, length))
    if verify:
        for i in np.flatnonzero(~small):
            s, length = int(starts[i]) + 12, int(lengths[i])
            good[i] = masked(crc32c(buf[s : s + length])) == _U32.unpack_from(buf, s + length)[0]
    return _records(good, found)


def _scalar_rows(rows: np.ndarray, idx: np.ndarray, ok: np.ndarray, length: int) -> Iterator[Group]:
    """The scalar records among records of one length (rows: their bytes), by where their summary
    begins (after a step varint of k bytes: p = 10 + k, or 9 without a step)."""
    has_step = rows[:, 9] == 0x10
    cont = rows[:, 10 : min(20, length)] >= 0x80
    k = np.where(cont.all(axis=1), 99, cont.argmin(axis=1) + 1)
    p = np.where(has_step, 10 + k, 9)
    ok = ok & (rows[:, 0] == 9)
    for pv in np.flatnonzero(np.bincount(p[ok])).tolist():
        lt = length - pv - 11  # the tag's bytes: length = p + 2 + L1, L1 = L2 + 2, L2 = Lt + 7
        if lt < 0 or lt + 9 >= 128 or pv > 20:
            continue
        mask = ok & (p == pv)
        r, sel = (rows, idx) if mask.all() else (rows[mask], idx[mask])
        shape = (
            (r[:, pv] == 0x2A)
            & (r[:, pv + 1] == lt + 9)
            & (r[:, pv + 2] == 0x0A)
            & (r[:, pv + 3] == lt + 7)
            & (r[:, pv + 4] == 0x0A)
            & (r[:, pv + 5] == lt)
            & (r[:, pv + 6 + lt] == 0x15)
        )
        if not shape.all():
            r, sel = r[shape], sel[shape]
        if not sel.size:
            continue
        walls = np.ascontiguousarray(r[:, 1:9]).view("<f8").ravel()
        values = np.ascontiguousarray(r[:, pv + 7 + lt : pv + 11 + lt]).view("<f4").ravel().astype(np.float64)
        steps = np.zeros(sel.size, np.int64)
        for j in range(pv - 10):
            steps |= (r[:, 10 + j] & 0x7F).astype(np.int64) << (7 * j)
        yield sel, steps, walls, values, r[:, pv + 6 : pv + 6 + lt]


def _records(good: np.ndarray, found: list[Group]) -> Records:
    tags: list[bytes] = []
    known: dict[bytes, int] = {}
    parts = []
    for sel, steps, walls, values, tag_rows in found:
        ids = np.empty(sel.size, np.int64)
        if (tag_rows == tag_rows[0]).all():  # one tag in the group: the common case
            uniq_rows, inverse = tag_rows[:1], np.zeros(sel.size, np.int64)
        else:
            h = np.zeros(sel.size, np.uint64)
            for j in range(tag_rows.shape[1]):
                h = (h * np.uint64(1099511628211)) ^ tag_rows[:, j].astype(np.uint64)
            _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
            if not (tag_rows == tag_rows[first][inverse]).all():  # a hash collision: by the rows themselves
                _, first, inverse = np.unique(tag_rows, axis=0, return_index=True, return_inverse=True)
            uniq_rows = tag_rows[first]
        local = np.empty(len(uniq_rows), np.int64)
        for u, row in enumerate(uniq_rows):
            tag = bytes(row)
            if tag not in known:
                known[tag] = len(tags)
                tags.append(tag)
            local[u] = known[tag]
        ids = local[inverse.ravel()]
        parts.append((sel, steps, walls, values, ids))
    if not parts:
        e = np.empty(0)
        return Records(good, np.empty(0, np.int64), np.empty(0, np.int64), e, e, np.empty(0, np.int64), [])
    cols = [np.concatenate(c) if len(parts) > 1 else c[0] for c in zip(*parts, strict=True)]
    which, steps, walls, values, ids = cols  # by the records' lengths, not in their order: see Records
    return Records(good, which, steps, walls, values, ids, tags)
