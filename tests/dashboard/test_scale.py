"""At scale, without timing anything (benchmarks/bench_watch.py times it): decimation keeps a lone
spike among 200,000 points in what is plotted, and a run read back in MetricsBlocks folds into the
same values as the same events one at a time."""

from __future__ import annotations

import math
import threading

import numpy as np

from tests.conftest import wait_for
from tuitrain.core.events import parse_line
from tuitrain.dashboard.charts import thin
from tuitrain.dashboard.model import DashboardState
from tuitrain.dashboard.series import Series
from tuitrain.dashboard.sources import FileSource, MetricsBlock

from .fixtures import recorded_run, write_jsonl

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
        bulk.extend(xs[lo:lo + 7_919], ys[lo:lo + 7_919])
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
        f.write('{"event":"MetricsLogged","split":"train","epoch":10,"step":20001,"metrics":{"loss":NaN,"lr":"x"},"time":1700090000.0}\n')
        f.write('{"event":"MetricsLogged","split":"train","epoch":10,"step":20002,"metrics":{"loss":0.25},"time":1700090001.0}\n')
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
