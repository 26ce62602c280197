"""Damaged TensorBoard files: the good part read, one line in `problems` for each thing skipped (the file
and the byte), never a traceback."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from tests.sources.conftest import read_all
from tuitrain.core.events import MediaLogged
from tuitrain.sources import tensorboard as tb
from tuitrain.sources import tfrecord
from tuitrain.sources.run_files import MetricsBlock

N = 200


@pytest.fixture()
def run(tmp_path) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path / "run"
    w = SummaryWriter(str(folder))
    for i in range(1, N + 1):
        w.add_scalar("loss", 1.0 + i / 1000, i)
        if i == N // 2:
            w.add_image("samples", np.full((3, 4, 4), 200, np.uint8), i)
    w.close()
    return folder


def _file(folder: Path) -> Path:
    (path,) = folder.glob("events.out.tfevents.*")
    return path


def _records(path: Path) -> list[tuple[int, int]]:
    """(start, data length) of each record, walked the plain way."""
    data, out, pos = path.read_bytes(), [], 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, n))
        pos += n + 16
    return out


def _loss(events) -> tuple[list, list]:
    xs, ys = [], []
    for e in events:
        if isinstance(e, MetricsBlock) and ("train", "step", "loss") in e.series:
            a, b = e.series[("train", "step", "loss")]
            xs += a.tolist()
            ys += b.tolist()
    return xs, ys


def _edit(path: Path, fn) -> None:
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(fn(data)))


def test_a_torn_last_record_is_said_once_at_rest(run):
    path = _file(run)
    last_start = _records(path)[-1][0]
    _edit(path, lambda d: d[: len(d) - 7])
    events, source = read_all(run)
    assert _loss(events)[0] == list(map(float, range(1, N)))
    assert source.problems == [f"{path.name}: a torn last record at byte {last_start:,} skipped"]
    # while the writer is live a partial record is normal: nothing said, read once it is whole
    events, source = read_all(run, live=True)
    assert source.problems == [] and len(_loss(events)[0]) == N - 1


def test_a_flipped_exponent_byte_is_caught_by_the_data_crc(run):
    path = _file(run)
    records = _records(path)
    start, n = records[50]  # step 50's record: its float is the last 4 bytes of the data
    _edit(path, lambda d: d.__setitem__(start + 12 + n - 1, d[start + 12 + n - 1] ^ 0x40) or d)
    events, source = read_all(run)
    xs, ys = _loss(events)
    assert 50.0 not in xs and len(xs) == N - 1 and max(ys) < 2
    assert source.problems == [f"{path.name}: the record at byte {start:,} is damaged (its CRC): skipped"]


def test_a_damaged_length_skips_to_the_next_record(run):
    path = _file(run)
    start, _ = _records(path)[20]
    nxt, _ = _records(path)[21]
    _edit(path, lambda d: d.__setitem__(start, d[start] ^ 0xFF) or d)
    events, source = read_all(run)
    xs, _ = _loss(events)
    assert len(xs) == N - 1 and 20.0 not in xs and xs[-1] == float(N)
    assert source.problems == [f"{path.name}: bytes {start:,}-{nxt:,} are no records (damaged): skipped"]


def test_garbage_between_records_and_a_garbage_file(run):
    path = _file(run)
    at, _ = _records(path)[100]
    junk = bytes(np.random.default_rng(1).integers(0, 256, 333, dtype=np.uint8))
    _edit(path, lambda d: d[:at] + junk + d[at:])
    (run / "events.out.tfevents.1999999999.host.9.0").write_bytes(junk * 3)
    (run / "events.out.tfevents.2000000000.host.9.0").write_bytes(b"")
    events, source = read_all(run)
    assert len(_loss(events)[0]) == N
    assert len(source.problems) == 2
    assert source.problems[0] == f"{path.name}: bytes {at:,}-{at + 333:,} are no records (damaged): skipped"
    assert source.problems[1].startswith("events.out.tfevents.1999999999.host.9.0: ")


def test_a_damaged_picture_is_skipped(run):
    path = _file(run)
    start, n = max(_records(path), key=lambda r: r[1])  # the image: the longest record
    _edit(path, lambda d: d.__setitem__(start + 12 + n // 2, d[start + 12 + n // 2] ^ 1) or d)
    events, source = read_all(run)
    assert not [e for e in events if isinstance(e, MediaLogged)]
    assert source.problems == [f"{path.name}: the record at byte {start:,} is damaged (its CRC): skipped"]
    assert len(_loss(events)[0]) == N


def test_many_damaged_records_take_a_bounded_number_of_lines(run):
    path = _file(run)
    records = _records(path)[1:120]

    def flip(d):
        for start, n in records:
            d[start + 12 + n - 1] ^= 0x01
        return d

    _edit(path, flip)
    _, source = read_all(run)
    assert len(source.problems) == tb.MAX_PROBLEMS + 1
    assert source.problems[-1] == f"{path.name}: {119 - tb.MAX_PROBLEMS:,} more damaged records skipped"


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 13])
def test_a_file_cut_inside_its_first_header(tmp_path, cut):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    w.add_scalar("loss", 1.0, 1)
    w.close()
    path = _file(tmp_path)
    _edit(path, lambda d: d[:cut])
    events, source = read_all(tmp_path)
    assert _loss(events) == ([], [])
    assert source.problems == [f"{path.name}: a torn last record at byte 0 skipped"]


def test_framing_finds_the_same_records_as_a_plain_walk(run):
    path = _file(run)
    data = path.read_bytes()
    framing = tfrecord.frame(data)
    assert [(int(s), int(n)) for s, n in zip(framing.starts, framing.lengths, strict=True)] == _records(path)
    assert framing.stop == len(data) and framing.torn is None and framing.damage == []
    assert tfrecord.read_records(data, framing.starts, framing.lengths).good.all()


def test_table_crc_matches_a_c_crc():
    rng = np.random.default_rng(3)
    for length in (1, 2, 7, 26, 101):
        rows = rng.integers(0, 256, (50, length), dtype=np.uint8)
        got = tfrecord.crc_rows(rows)
        assert [int(c) for c in got] == [tfrecord._py_crc32c(bytes(r)) for r in rows]
    assert tfrecord._py_crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value


def test_a_record_written_in_two_parts_is_read_once_whole(run):
    """A live file caught in the middle of a flush: nothing said, the record read when it is whole."""
    path = _file(run)
    data = path.read_bytes()
    start, n = _records(path)[-1]
    (ref,) = tb.find_runs(run)
    events: list = []
    source = tb.open_source(ref, live=True)
    source.open(lambda e, s=None: events.append(e))
    for cut in (start + 5, start + 12, start + 12 + n // 2, len(data)):
        path.write_bytes(data[:cut])
        source.read_to_end()
        assert source.problems == []
    xs, ys = _loss(events)
    assert xs == list(map(float, range(1, N + 1))) and ys[-1] == pytest.approx(1.0 + N / 1000)


def test_records_longer_than_a_read_and_garbage_longer_than_one(tmp_path, monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setattr(tb, "CHUNK", 2048)  # the file read 2 KB at a time
    rng = np.random.default_rng(2)
    picture = rng.integers(0, 255, (3, 48, 48), dtype=np.uint8)  # a PNG of ~7 KB: longer than a read
    w = SummaryWriter(str(tmp_path))
    for i in range(1, 301):
        w.add_scalar("loss", float(i), i)
        if i % 100 == 0:
            w.add_image("big", picture, i)
    w.close()
    (tmp_path / "events.out.tfevents.1.host.1.0").write_bytes(bytes(rng.integers(1, 255, 5000, dtype=np.uint8)))
    events, source = read_all(tmp_path)
    assert _loss(events)[0] == list(map(float, range(1, 301)))
    assert [e.step for e in events if isinstance(e, MediaLogged)] == [100, 200, 300]
    assert source.problems == ["events.out.tfevents.1.host.1.0: bytes 0-5,000 are no records (damaged): skipped"]
