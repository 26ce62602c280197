import sys

import pytest

from tuitrain.core.events import EpochCompleted, MetricsLogged
from tuitrain.sinks import tensorboard as tb


class FakeWriter:
    def __init__(self, log_dir):
        self.log_dir, self.scalars, self.flushes, self.closed = log_dir, [], 0, False

    def add_scalar(self, tag, value, global_step=None, walltime=None):
        self.scalars.append((tag, value, global_step))

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closed = True


def test_scalar_tags_and_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(tb, "summary_writer_class", lambda: FakeWriter)
    sink = tb.TensorBoardSink(tmp_path)
    assert sink.writer.log_dir == str(tmp_path / "tensorboard")
    sink(MetricsLogged(split="train", epoch=1, step=7, metrics={"loss": 0.1 + 0.2, "n": 3, "tag": "x"}))
    sink(MetricsLogged(split="valid", epoch=1, step=8, metrics={"accuracy": 0.5}, scope="epoch"))
    sink(EpochCompleted(epoch=1, epochs=1, step=8, metrics={}, duration=1.0))
    writer = sink.writer
    sink.close()
    assert writer.scalars == [("train/loss", 0.1 + 0.2, 7), ("train/n", 3.0, 7), ("valid/epoch_accuracy", 0.5, 8)]
    assert writer.flushes == 1 and writer.closed
    sink(MetricsLogged(split="train", epoch=1, step=9, metrics={"loss": 1.0}))  # after close: ignored


def test_missing_tensorboard_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # absent, installed or not: find_spec gives None
    with pytest.raises(RuntimeError, match=r"pip install 'tuitrain\[tensorboard\]'"):
        tb.TensorBoardSink(tmp_path)


def test_real_writer_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = tb.TensorBoardSink(tmp_path)
    sink(MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.25}))
    sink(MetricsLogged(split="train", epoch=1, step=2, metrics={"loss": 0.75}))
    sink(MetricsLogged(split="valid", epoch=1, step=2, metrics={"accuracy": 0.5}, scope="epoch"))
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("train/loss")] == [(1, 1.25), (2, 0.75)]
    assert [(s.step, s.value) for s in acc.Scalars("valid/epoch_accuracy")] == [(2, 0.5)]
