"""The TensorBoard source on files SummaryWriter, tensorboardX and Lightning's TensorBoardLogger wrote,
read back and compared with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.sources.conftest import EVERY, HOSTILE, HPARAMS, STEPS, accumulator, read_all
from tuitrain.core.events import HistogramLogged, MediaLogged, RunFinished, RunStarted
from tuitrain.sources import tensorboard as tb
from tuitrain.sources.run_files import MetricsBlock


def _series(events) -> dict:
    """{(split, scope, name): (steps, values)} over all the blocks said."""
    out: dict = {}
    for e in events:
        if isinstance(e, MetricsBlock):
            for key, (xs, ys) in e.series.items():
                old = out.get(key, (np.empty(0), np.empty(0)))
                out[key] = (np.concatenate([old[0], xs]), np.concatenate([old[1], ys]))
    return out


def _check_against_accumulator(folder: Path, events) -> None:
    acc = accumulator(folder)
    series = _series(events)
    by_tag = {}
    for tag in acc.Tags()["scalars"]:
        by_tag[tag] = ([s.step for s in acc.Scalars(tag)], [s.value for s in acc.Scalars(tag)])
    assert by_tag, "EventAccumulator found no scalars"
    for tag, (steps, values) in by_tag.items():
        key = tb.split_of(tag)
        assert key in series, (tag, list(series))
        xs, ys = series[key]
        assert xs.tolist() == [float(s) for s in steps], tag
        np.testing.assert_array_equal(ys, np.asarray(values, np.float64), err_msg=tag)
    images = [e for e in events if isinstance(e, MediaLogged) and e.kind == "image"]
    want = [(i.step, i.encoded_image_string) for i in acc.Images("samples")]
    assert [(e.step, Path(e.path).read_bytes()) for e in images] == want
    assert all(Path(e.path).is_absolute() and folder not in Path(e.path).parents for e in images)
    assert {(e.width, e.height) for e in images} == {(12, 8)}
    hists = [e for e in events if isinstance(e, HistogramLogged)]
    theirs = acc.Histograms("weights/fc1")
    assert [h.step for h in hists] == [h.step for h in theirs] == list(range(EVERY, STEPS + 1, EVERY))
    for mine, their in zip(hists, theirs, strict=True):
        v = their.histogram_value
        assert sum(mine.counts) == int(v.num) == 1000
        assert (mine.min, mine.max) == (v.min, v.max)
        assert mine.mean == pytest.approx(v.sum / v.num)
        assert len(mine.counts) == 48 and (mine.low, mine.high) == (hists[0].min, hists[0].max)
    # the re-binned counts agree with the bucket counts TensorBoard holds, summed over the same range
    first, their = hists[0], theirs[0].histogram_value
    limits, counts = np.asarray(their.bucket_limit), np.asarray(their.bucket)
    middle = (first.low + first.high) / 2
    below = counts[limits <= middle].sum()
    assert abs(sum(first.counts[:24]) - below) <= max(counts.max(), 1)


def test_summarywriter_run_read_as_event_accumulator_reads_it(summarywriter_run):
    events, source = read_all(summarywriter_run)
    assert source.problems == []
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    assert events[0].config == HPARAMS  # add_hparams' folder read as this run's config
    _check_against_accumulator(summarywriter_run, events)
    series = _series(events)
    assert series[("valid", "step", "loss")][0].tolist() == list(range(EVERY, STEPS + 1, EVERY))
    assert series[("valid", "step", "accuracy")][1][-1] == 1.0
    xs, ys = series[("train", "step", "tensor_style")]  # a tensor-encoded scalar (new_style=True)
    assert xs.tolist() == [100.0, 200.0, 300.0] and ys.tolist() == [50.0, 100.0, 150.0]
    texts = [e for e in events if isinstance(e, MediaLogged) and e.kind == "text"]
    assert [t.key for t in texts] == ["notes"] * (STEPS // EVERY)
    assert texts[0].text == "step 50: \x1b[31mred\x1b[0m"  # as written: the panel shows it safely
    assert ("train", "step", HOSTILE) in series  # a hostile tag passes through as a name of our own does


def test_tensorboardx_run(tensorboardx_run):
    events, source = read_all(tensorboardx_run)
    assert source.problems == []
    assert events[0].config == HPARAMS
    _check_against_accumulator(tensorboardx_run, events)


def test_lightning_tensorboard_logger_run(lightning_run):
    events, source = read_all(lightning_run)
    assert source.problems == []
    assert isinstance(events[0], RunStarted)
    assert events[0].config.get("lr") == 0.05 and events[0].config.get("hidden") == 8
    acc = accumulator(lightning_run)
    series = _series(events)
    # Lightning's epoch counter is the run's epoch, and its hp_metric left at -1 a placeholder: neither a chart
    assert not any(key[2] in ("epoch", "hp_metric") for key in series)
    for tag in acc.Tags()["scalars"]:
        if tag == "epoch" or (tag == "hp_metric" and all(s.value == -1 for s in acc.Scalars(tag))):
            continue
        xs, ys = series[tb.split_of(tag)]
        assert xs.tolist() == [float(s.step) for s in acc.Scalars(tag)], tag
        np.testing.assert_array_equal(ys, [s.value for s in acc.Scalars(tag)])
    assert ("train", "step", "loss") in series and ("valid", "step", "loss") in series
    blocks = [e for e in events if isinstance(e, MetricsBlock)]
    assert blocks[-1].epoch == 2  # Lightning's "epoch" scalar, from 0: the second epoch


def test_find_runs_nested_and_files_in_order(summarywriter_run, tmp_path):
    root = tmp_path / "logs"
    shutil.copytree(summarywriter_run, root / "a")
    shutil.copytree(summarywriter_run, root / "group" / "b")
    (root / "empty").mkdir()
    (root / "group" / "notes.txt").write_text("not a run")
    runs = tb.find_runs(root)
    assert [r.name for r in runs] == ["a", "group/b"]  # add_hparams' folders are not runs of their own
    assert all(r.tool == "tensorboard" for r in runs)
    assert tb.find_runs(root / "empty") == [] and tb.find_runs(root / "group" / "notes.txt") == []
    (one,) = tb.find_runs(next((root / "a").glob("events.out.tfevents.*")))
    assert one.path == root / "a"
    # a run written in two sessions: its files read in the order of the timestamps in their names
    folder = tmp_path / "two"
    folder.mkdir()
    from torch.utils.tensorboard import SummaryWriter

    for session, (start, name) in enumerate([(1, "events.out.tfevents.1700000009.host.1.0"), (11, None)]):
        w = SummaryWriter(str(folder), filename_suffix=f".s{session}")
        for i in range(start, start + 10):
            w.add_scalar("loss", float(i), i)
        w.close()
        if name:  # the first session's file named earlier than the second's, whatever the clock says
            (path,) = [p for p in folder.iterdir() if p.name.endswith(".s0")]
            path.rename(folder / name)
    events, source = read_all(folder)
    assert _series(events)[("train", "step", "loss")][0].tolist() == list(map(float, range(1, 21)))


@pytest.mark.parametrize(
    ("tag", "key"),
    [
        ("loss", ("train", "step", "loss")),
        ("loss/val", ("valid", "step", "loss")),
        ("val/loss", ("valid", "step", "loss")),
        ("val_loss", ("valid", "step", "loss")),
        ("loss_valid", ("valid", "step", "loss")),
        ("Validation/acc", ("valid", "step", "acc")),
        ("train_loss", ("train", "step", "loss")),
        ("loss/train", ("train", "step", "loss")),
        ("train/epoch_loss", ("train", "epoch", "loss")),  # tuitrain's own sink's aggregate
        ("eval/f1/macro", ("valid", "step", "f1/macro")),
        ("test/acc", ("train", "step", "test/acc")),
        ("interval", ("train", "step", "interval")),
        ("val", ("train", "step", "val")),
        ("val-acc", ("valid", "step", "acc")),
        ("VAL_loss", ("valid", "step", "loss")),
        ("interval_loss", ("train", "step", "interval_loss")),
        ("train_loss_epoch", ("train", "epoch", "loss")),  # Lightning's on_epoch value, as its CSV reader has it
        ("train_loss_step", ("train", "step", "loss")),
        ("acc_step", ("train", "step", "acc")),
    ],
)
def test_split_of(tag, key):
    assert tb.split_of(tag) == key


def test_two_tags_one_name_stay_apart(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    for i in range(1, 4):
        w.add_scalar("train/loss", 1.0, i)
        w.add_scalar("loss", 2.0, i)
    w.close()
    series = _series(read_all(tmp_path)[0])
    assert series[("train", "step", "loss")][1].tolist() == [1.0] * 3
    assert series[("train", "step", "loss (2)")][1].tolist() == [2.0] * 3


def test_the_dashboard_folds_it(summarywriter_run):
    from tuitrain.dashboard.state.model import DashboardState

    events, _ = read_all(summarywriter_run)
    state = DashboardState()
    state.apply(events)
    xs, ys = state.metric_series("loss", "train").points()
    assert xs[0] == 1 and xs[-1] == STEPS and ys[-1] == pytest.approx(1 / STEPS)
    assert state.latest["valid/loss"] == pytest.approx(2 / STEPS)
    assert state.step == STEPS
    assert state.finished is not None


def test_media_cache_is_per_user_and_named_by_the_bytes(tmp_path, monkeypatch):
    from tuitrain.sources import media_cache

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder should be")
    monkeypatch.setenv("TUITRAIN_CACHE", str(blocked))  # cannot be made: the next place is used
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    media_cache.reset()
    try:
        first = media_cache.store(b"\x89PNG picture bytes", ".png")
        assert first is not None and first.parent.parent == tmp_path / "xdg" / "tuitrain" / "media"
        assert media_cache.store(b"\x89PNG picture bytes", ".png") == first  # written once
        assert first.read_bytes() == b"\x89PNG picture bytes"
        assert media_cache.store(b"other", ".png") != first
        assert not list(first.parent.glob(".part-*"))
    finally:
        media_cache.reset()


def test_tensor_forms_of_tf_summary(tmp_path):
    """What TF2's tf.summary writes (scalars, histograms and texts as tensors, the plugin named in a
    tag's first record only), made with TensorBoard's own summary_v2 protobuf writers."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.histogram import summary_v2 as histogram
    from tensorboard.plugins.scalar import summary_v2 as scalar
    from tensorboard.plugins.text import summary_v2 as text
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    rng = np.random.default_rng(5)
    w = EventFileWriter(str(tmp_path))
    for step in range(1, 6):
        for pb in (
            scalar.scalar_pb("val/accuracy", step / 10),
            histogram.histogram_pb("acts", rng.normal(size=500), buckets=30),
            text.text_pb("log", f"line {step}"),
        ):
            if step > 1:  # as TF writes them: the metadata only in a tag's first record
                pb.value[0].ClearField("metadata")
            w.add_event(event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=pb))
    w.close()
    events, source = read_all(tmp_path)
    assert source.problems == []
    xs, ys = _series(events)[("valid", "step", "accuracy")]
    assert xs.tolist() == [1, 2, 3, 4, 5] and ys == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    hists = [e for e in events if isinstance(e, HistogramLogged)]
    assert [h.step for h in hists] == [1, 2, 3, 4, 5] and all(sum(h.counts) == 500 for h in hists)
    texts = [e.text for e in events if isinstance(e, MediaLogged) and e.kind == "text"]
    assert texts == [f"line {s}" for s in range(1, 6)]


def test_without_the_tensorboard_package_plain_scalars_are_read(summarywriter_run, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto.event_pb2", None)  # import fails
    events, source = read_all(summarywriter_run)
    assert len(source.problems) == 1 and "pip install 'tuitrain[tensorboard]'" in source.problems[0]
    series = _series(events)
    assert series[("train", "step", "loss")][0].tolist() == list(map(float, range(1, STEPS + 1)))
    assert not [e for e in events if isinstance(e, (MediaLogged, HistogramLogged))]


def test_a_block_says_its_events(summarywriter_run):
    events, _ = read_all(summarywriter_run)
    block = next(e for e in events if isinstance(e, MetricsBlock))
    said = block.events()
    assert len(said) == len(block) and block.lines == []
    loss = [(e.step, e.metrics["loss"]) for e in said if e.split == "train" and "loss" in e.metrics]
    assert loss[:2] == [(1, 1.0), (2, pytest.approx(0.5))]


def test_steps_of_every_varint_length_and_interleaved_tags(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    steps = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**35, 2**56 + 3]
    w = SummaryWriter(str(tmp_path))
    for k, step in enumerate(steps):
        w.add_scalar("a", float(k), step)
        w.add_scalar("val/bb", -float(k), step)
        w.add_scalar("t" * 119, 0.5, step)  # the longest tag of the plain shape (a one-byte summary length)
        w.add_scalar("u" * 120, 0.25, step)  # one byte more: protobuf's path
    w.close()
    events, source = read_all(tmp_path)
    series = _series(events)
    acc = accumulator(tmp_path)
    for tag in acc.Tags()["scalars"]:
        xs, ys = series[tb.split_of(tag)]
        assert xs.tolist() == [float(s.step) for s in acc.Scalars(tag)] == [float(s) for s in steps]
        assert ys.tolist() == [s.value for s in acc.Scalars(tag)]
    assert list(series)[:2] == [("train", "step", "a"), ("valid", "step", "bb")]
