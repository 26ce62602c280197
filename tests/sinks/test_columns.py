"""events.columns, the side file JsonlWriter writes beside events.jsonl: each record holds the numbers
of a run of MetricsLogged lines exactly, names the bytes it came from, and a resumed or reused run
directory keeps only records that still match events.jsonl."""

from __future__ import annotations

import zlib

from tuitrain.core.events import DevicesSampled, MetricsLogged, RunStarted, parse_line
from tuitrain.sinks.columns import FILENAME, ColumnsReader
from tuitrain.sinks.jsonl import JsonlWriter


def logged(step: int, **metrics) -> MetricsLogged:
    return MetricsLogged(
        split="train",
        epoch=1 + step // 100,
        step=step,
        batch=step % 100,
        batches=100,
        time=1_700_000_000.0 + step / 8,
        metrics=metrics or {"loss": 1 / step, "lr": 3e-4},
    )


def write(run_dir, events, batch: int = 7, **kw) -> None:
    w = JsonlWriter(run_dir, flush_interval=1e9, background=False, **kw)
    for i, e in enumerate(events):
        w(e)
        if i % batch == batch - 1:
            w.end_batch()
    w.close()


def records(run_dir):
    """[(record, ints, floats, the events of its lines)] of a run directory's side file."""
    reader = ColumnsReader(run_dir)
    data = (run_dir / "events.jsonl").read_bytes()
    out = []
    for r in reader.refresh():
        ints, floats = reader.columns(r)
        lines = data[r.start : r.end]
        assert zlib.crc32(lines) == r.crc
        out.append((r, ints, floats, [parse_line(x) for x in lines.splitlines()]))
    reader.close()
    return out


def test_records_hold_each_logged_lines_numbers_exactly(tmp_path):
    events = [
        RunStarted(
            run_dir=str(tmp_path), experiment="x", epochs=1, max_steps=0, steps_per_epoch=100, batch_size=8, time=1.0
        )
    ]
    events += [logged(s) for s in range(1, 40)]
    events[20] = logged(20, loss=0.1 + 0.2, lr=3, count=7)  # another kind of row: a record of its own
    events.insert(
        30, DevicesSampled(cpu=1.0, cpu_per_core=[1.0], memory=2.0, memory_used=1, memory_total=2, rss=3, time=2.0)
    )
    write(tmp_path, events)
    got = records(tmp_path)
    covered = [e for _, _, _, evs in got for e in evs]
    assert covered == [e for e in events if isinstance(e, MetricsLogged)]  # every logged line, each once
    for r, ints, floats, evs in got:
        assert r.rows == len(evs) and all(tuple(e.metrics) == r.names and e.split == r.split for e in evs)
        assert ints.tolist() == [
            [e.step for e in evs],
            [e.epoch for e in evs],
            [e.batch for e in evs],
            [e.batches for e in evs],
        ]
        assert floats[0].tolist() == [e.time for e in evs]
        for j, name in enumerate(r.names):
            assert floats[1 + j].tolist() == [e.metrics[name] for e in evs]
    assert any(r.names == ("loss", "lr", "count") and floats[1, 0] == 0.1 + 0.2 for r, _, floats, _ in got)


def test_values_the_columns_cannot_hold_exactly_are_left_to_the_json(tmp_path):
    odd = [
        logged(1, loss=float("nan")),
        logged(2, loss=True),
        logged(3, loss="x"),
        MetricsLogged(split="train", epoch=1, step=2**64, metrics={"loss": 1.0}, time=1.0),
        MetricsLogged(split="train", epoch=1, step=6, metrics={}, time=1.0),
    ]
    write(tmp_path, odd + [logged(7)])
    (only,) = records(tmp_path)
    assert only[3] == [logged(7)]


def test_a_resumed_run_appends_after_a_torn_line_and_a_torn_record(tmp_path):
    write(tmp_path, [logged(s) for s in range(1, 30)])
    with open(tmp_path / "events.jsonl", "ab") as f:
        f.write(b'{"event":"MetricsLogged","split":"tr')  # killed mid-line
    side = tmp_path / FILENAME
    side.write_bytes(side.read_bytes() + side.read_bytes()[:50])  # and mid-record
    write(tmp_path, [logged(s) for s in range(30, 60)])
    got = records(tmp_path)
    assert [e.step for _, _, _, evs in got for e in evs] == list(range(1, 60))


def test_a_side_file_of_another_events_jsonl_is_started_anew(tmp_path):
    write(tmp_path, [logged(s) for s in range(1, 30)])
    (tmp_path / "events.jsonl").unlink()  # the run directory reused: the old side file names bytes not there
    write(tmp_path, [logged(s) for s in range(100, 110)])
    got = records(tmp_path)
    assert [e.step for _, _, _, evs in got for e in evs] == list(range(100, 110))
    assert got[0][0].start == 0


def test_no_side_file_when_asked_not_to(tmp_path):
    write(tmp_path, [logged(s) for s in range(1, 10)], columns=False)
    assert not (tmp_path / FILENAME).exists()


def test_a_damaged_payload_is_not_read(tmp_path):
    write(tmp_path, [logged(s) for s in range(1, 30)], batch=100)
    side = tmp_path / FILENAME
    data = bytearray(side.read_bytes())
    data[-3] ^= 0xFF
    side.write_bytes(bytes(data))
    reader = ColumnsReader(tmp_path)
    (r,) = reader.refresh()
    assert reader.columns(r) is None
