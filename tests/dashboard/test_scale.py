"""At scale, without timing anything (benchmarks/bench_watch.py times it): decimation keeps a lone
spike among 200,000 points in what is plotted, and a run read back in MetricsBlocks folds into the
same values as the same events one at a time."""

from __future__ import annotations

import math
import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from tuitrain.core.events import MetricsLogged, parse_line
from tuitrain.dashboard.charts.plan import thin
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.dashboard.state.series import Anchors, Series
from tuitrain.sources.run_files import FileSource, MetricsBlock

from .fixtures import devices, recorded_run, write_jsonl

SPIKE_AT = 123_457


def spiky(n: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    xs = np.arange(1, n + 1, dtype=np.float64)
    ys = 1.0 / np.sqrt(xs) + 0.01 * np.sin(xs)
    ys[SPIKE_AT - 1] = 50.0
    return xs, ys


def test_a_lone_spike_among_200k_points_reaches_the_plotted_points_one_by_one_and_in_bulk():
    xs, ys = spiky()
    one, bulk = Series(capacity=1024, recent=400), Series(capacity=1024, recent=400)
    for x, y in zip(xs.tolist(), ys.tolist()):
        one.append(x, y)
    for lo in range(0, xs.size, 7_919):  # blocks of an odd size, as a file's chunks come
        bulk.extend(xs[lo : lo + 7_919], ys[lo : lo + 7_919])
    for s in (one, bulk):
        px, py = s.points()
        assert len(px) <= 2 * 1024 + 1  # bounded whatever the history
        assert max(py) == 50.0 and px[py.index(50.0)] == SPIKE_AT
        assert min(py) == s.min == float(ys.min())
        assert (px[0], px[-1]) == (1.0, 200_000.0) and px == sorted(px)
        tx, ty = thin(px, py, 100)  # what a 100-column chart draws
        assert 50.0 in ty and tx[ty.index(50.0)] == SPIKE_AT
    assert one.points() == bulk.points()
    assert one.count == bulk.count == 200_000 and one.last == bulk.last
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(one.means()[1], bulk.means()[1]))


def test_non_finite_values_in_bulk_are_counted_not_plotted():
    s = Series(capacity=16, recent=10)
    s.extend([1, 2, 3, 4], [1.0, float("nan"), float("inf"), 2.0])
    assert s.count == 2 and s.skipped == 2 and s.points() == ([1.0, 4.0], [1.0, 2.0])


def read_back(run_dir, blocks: bool) -> tuple[DashboardState, FileSource, list]:
    state, src, got = DashboardState(), FileSource(run_dir, poll=0.02, chunk=1 << 16, blocks=blocks), []
    src.open(lambda e, s: got.append(e))
    worker = threading.Thread(target=src.work, daemon=True)
    worker.start()
    wait_for(lambda: src.caught_up, timeout=60, what="the source to read the whole file")
    src.close()
    worker.join(5)
    state.apply(got)
    return state, src, got


def test_a_20k_step_run_read_in_blocks_folds_as_its_events_one_by_one(tmp_path):
    events = recorded_run(epochs=10, steps_per_epoch=2_000, end="completed", spike_at=7_777)
    path = write_jsonl(tmp_path / "events.jsonl", events)
    with open(path, "a") as f:  # lines the fast path leaves to the general one, amid the others
        f.write(
            '{"event":"MetricsLogged","split":"train","epoch":10,"step":20001,"metrics":{"loss":NaN,"lr":"x"},"time":1700090000.0}\n'
        )
        f.write(
            '{"event":"MetricsLogged","split":"train","epoch":10,"step":20002,"metrics":{"loss":0.25},"time":1700090001.0}\n'
        )
        f.write('{"event":"MetricsLogged","split":"train","epoch":10,"step":99999999999999999999,"metrics":{}}\n')
        f.write("not json\n")
    blocks, src, got = read_back(tmp_path, blocks=True)
    assert any(isinstance(e, MetricsBlock) for e in got)
    slow, slow_src, _ = read_back(tmp_path, blocks=False)
    expected = [e for e in map(parse_line, path.read_bytes().splitlines()) if e is not None]
    read = [e for item in got for e in (item.events() if isinstance(item, MetricsBlock) else [item])]
    assert [e.to_json() for e in read] == [e.to_json() for e in expected]  # as JSON: NaN == NaN
    assert src.bad_lines == slow_src.bad_lines == 2 and src.lines_read == slow_src.lines_read
    for st in (blocks, slow):
        assert st.step == 20_002 and st.final == "completed"
    assert blocks.metric_names == slow.metric_names
    assert blocks.latest == slow.latest
    assert blocks.latest["train/loss"] == 0.25
    for name in ("loss", "accuracy", "lr"):
        assert blocks.best_valid(name) == slow.best_valid(name)
        for split in ("train", "valid"):
            a, b = blocks.metric_series(name, split), slow.metric_series(name, split)
            assert (a is None) == (b is None)
            if a is not None:
                assert (a.last, a.min, a.max, a.count, a.skipped) == (b.last, b.min, b.max, b.count, b.skipped)
                assert a.points() == b.points()
    assert max(blocks.metric_series("loss", "train").points()[1]) == 50.0  # the spike
    assert blocks.rates() == slow.rates() and blocks.epoch == slow.epoch
    assert (blocks.batch, blocks.batches) == (slow.batch, slow.batches)
    for axis in ("time", "epoch", "samples"):
        assert blocks.axes[axis].steps[-1] == slow.axes[axis].steps[-1]
        assert blocks.axes[axis].values[-1] == slow.axes[axis].values[-1]


# --- events.columns: the numbers beside events.jsonl -------------------------------------------------


def write_with_columns(run_dir, events, batch: int = 50):
    """The run as the run's JsonlWriter writes it (events.jsonl and events.columns), `batch` events a flush."""
    from tuitrain.sinks.jsonl import JsonlWriter

    run_dir.mkdir(parents=True, exist_ok=True)
    w = JsonlWriter(run_dir, flush_interval=1e9, background=False)
    for i, e in enumerate(events):
        w(e)
        if i % batch == batch - 1:
            w.end_batch()
    w.close()


def assert_same(a: DashboardState, b: DashboardState) -> None:
    assert (a.step, a.epoch, a.final, a.batch, a.batches) == (b.step, b.epoch, b.final, b.batch, b.batches)
    assert a.metric_names == b.metric_names and a.latest == b.latest and a.rates() == b.rates()
    assert a.series.keys() == b.series.keys()
    for key, s in a.series.items():
        t = b.series[key]
        assert (s.last, s.min, s.max, s.count, s.skipped) == (t.last, t.min, t.max, t.count, t.skipped), key
        assert s.points() == t.points() and s.points(50) == t.points(50), key
    for axis in ("time", "epoch", "samples"):
        assert (a.axes[axis].steps[-1], a.axes[axis].values[-1]) == (b.axes[axis].steps[-1], b.axes[axis].values[-1])


def from_columns(got) -> int:
    return sum(1 for e in got if isinstance(e, MetricsBlock) and e._raw is not None)


def test_a_run_read_from_its_side_file_folds_as_its_json(tmp_path):
    events = [
        e for e in recorded_run(epochs=10, steps_per_epoch=2_000, end="completed", spike_at=7_777) if e.persistent
    ]
    write_with_columns(tmp_path, events)
    fast, src, got = read_back(tmp_path, blocks=True)
    assert from_columns(got) > 0
    json_only = FileSource(tmp_path, columns=False)
    slow, slow_src, slow_got = read_back(tmp_path, blocks=False)
    assert not from_columns(slow_got) and json_only.use_columns is False
    read = [e for item in got for e in (item.events() if isinstance(item, MetricsBlock) else [item])]
    assert [e.to_json() for e in read] == [e.to_json() for e in events]
    assert src.lines_read == slow_src.lines_read == len(events) and src.bad_lines == 0
    assert_same(fast, slow)
    assert max(fast.metric_series("loss", "train").points()[1]) == 50.0  # the spike


def test_device_samples_between_logged_steps_do_not_cut_the_blocks_and_keep_their_steps(tmp_path):
    """A sampler's line every few flushes (as a real run's every second) sits between records of the
    side file: the block goes on past it, and each sample's device point stays at the step it came at."""
    events = []
    for e in recorded_run(epochs=3, steps_per_epoch=600, end="completed"):
        if not e.persistent:
            continue
        events.append(e)
        if isinstance(e, MetricsLogged) and e.split == "train" and e.step % 100 == 0:
            events.append(devices(e.time, cpu=float(e.step % 97)))
    write_with_columns(tmp_path, events, batch=25)
    fast, src, got = read_back(tmp_path, blocks=True)
    carried = [row for e in got if isinstance(e, MetricsBlock) for row, _ in e.samples]
    assert len(carried) > 10 and all(row > 0 for row in carried)
    read = [e for item in got for e in (item.events() if isinstance(item, MetricsBlock) else [item])]
    assert [e.to_json() for e in read] == [e.to_json() for e in events]
    slow, slow_src, _ = read_back(tmp_path, blocks=False)
    assert src.lines_read == slow_src.lines_read == len(events)
    assert_same(fast, slow)
    cpu = fast.series[("train", "step", "device/cpu")]
    assert cpu.points() == slow.series[("train", "step", "device/cpu")].points()
    assert cpu.points()[0][:3] == [100.0, 200.0, 300.0] and cpu.points()[1][:3] == [3.0, 6.0, 9.0]
    assert fast.devices[0].cpu == slow.devices[0].cpu


def test_a_stale_or_damaged_side_file_is_not_believed(tmp_path):
    events = [e for e in recorded_run(epochs=4, steps_per_epoch=500, end="completed") if e.persistent]
    write_with_columns(tmp_path, events)
    jsonl, side = tmp_path / "events.jsonl", tmp_path / "events.columns"
    good_side = side.read_bytes()
    expected, _, _ = read_back(tmp_path, blocks=False)

    # events.jsonl changed under the side file: a logged value rewritten in place, same length
    text = jsonl.read_bytes()
    at = text.index(b'"step":777,')
    line_end = text.index(b"\n", at)
    line = text[text.rindex(b"\n", 0, at) + 1 : line_end]
    value = line[line.index(b'"loss":') + 7 :].split(b",")[0]
    changed = text[: line_end - len(line)] + line.replace(value, b"9" * len(value), 1) + text[line_end:]
    jsonl.write_bytes(changed)
    edited, _, got = read_back(tmp_path, blocks=True)
    assert from_columns(got) > 0  # the other records are still used
    assert float(b"9" * len(value)) in edited.metric_series("loss", "train").points()[1]
    jsonl.write_bytes(text)

    # a damaged payload, a damaged head, a torn last record, another run's side file: the JSON's values
    damaged = bytearray(good_side)
    damaged[len(good_side) // 2] ^= 0x55
    other = tmp_path / "other"
    write_with_columns(other, [e for e in recorded_run(epochs=4, steps_per_epoch=500, spike_at=3) if e.persistent])
    for bad in (
        bytes(damaged),
        good_side[:40] + b"\0" * 8 + good_side[48:],
        good_side[:-100],
        (other / "events.columns").read_bytes(),
        b"not a side file",
    ):
        side.write_bytes(bad)
        state, src, _ = read_back(tmp_path, blocks=True)
        assert_same(state, expected)
        assert src.bad_lines == 0


def test_a_live_run_with_its_side_file_is_followed_to_the_last_step(tmp_path):
    from tuitrain.sinks.jsonl import JsonlWriter

    events = [e for e in recorded_run(epochs=6, steps_per_epoch=1_000, end="completed") if e.persistent]
    expected_dir = tmp_path / "expected"
    write_with_columns(expected_dir, events)
    expected, _, _ = read_back(expected_dir, blocks=False)
    run = tmp_path / "live"
    run.mkdir()
    w = JsonlWriter(run, flush_interval=1e9, background=False)
    state, src, got = DashboardState(), FileSource(run, poll=0.01, chunk=1 << 12), []
    src.open(lambda e, s: got.append(e))
    worker = threading.Thread(target=src.work, daemon=True)
    worker.start()
    try:
        for i, e in enumerate(events):
            w(e)
            if i % 300 == 299:  # records bigger than the reader's chunk: it reads on to their ends
                w.end_batch()
        w.close()
        wait_for(lambda: src.lines_read == len(events), timeout=60, what="the reader to reach the last line")
    finally:
        src.close()
        worker.join(5)
    state.apply(got)
    assert from_columns(got) > 0
    assert_same(state, expected)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40), st.one_of(st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf, -math.inf]))
        ),
        max_size=60,
    ),
    st.integers(1, 4),
)
def test_anchors_extended_in_bulk_map_steps_as_anchors_added_one_by_one(points, parts):
    """A block's anchors (repeated, older and non-finite steps among them) give the map that adding
    each gives: the highest value at a repeated step, a clock that never runs backwards."""
    one, bulk = Anchors(capacity=1000), Anchors(capacity=1000)
    for step, value in points:
        one.add(float(step), value)
    cut = max(1, len(points) // parts)
    for i in range(0, len(points), cut):
        chunk = points[i : i + cut]
        bulk.extend([p[0] for p in chunk], [p[1] for p in chunk])
    assert bulk.steps == one.steps
    assert bulk.values == one.values
