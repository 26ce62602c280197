import sys

import pytest

from tuitrain.core.events import EpochCompleted, HistogramLogged, MediaLogged, MetricsLogged
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


def media_events(run_dir):
    """A PNG written as the media log writes it, and the events that say an image, a text and a
    histogram were logged."""
    import torch

    from tuitrain.core.images import png_bytes

    img = torch.zeros(3, 6, 10, dtype=torch.uint8)
    img[0, :, :5] = 255  # the left half red, a blue dot at (row 2, column 7)
    img[2, 2, 7] = 200
    (run_dir / "media" / "samples").mkdir(parents=True)
    (run_dir / "media" / "samples" / "5.png").write_bytes(png_bytes(img))
    return img, [
        MediaLogged(key="samples", step=5, kind="image", path="media/samples/5.png", width=10, height=6),
        MediaLogged(key="samples", step=6, kind="image", path="media/samples/6.png", width=10, height=6),  # thinned
        MediaLogged(key="sample", step=5, kind="text", path="media/sample/5.txt", text="def f():\n    return '```'"),
        HistogramLogged(
            key="weights/fc1", step=5, low=-2.0, high=2.0, counts=[0, 3, 1, 0], min=-0.9, max=0.4, mean=-0.5
        ),
        HistogramLogged(key="weights/fc1", step=6, low=-2.0, high=2.0, counts=[0, 0, 0, 0]),  # nothing counted
    ]


def test_histogram_buckets_keep_the_counted_bins_behind_an_empty_one():
    raw = tb.histogram_buckets(
        HistogramLogged(key="w", step=1, low=-2.0, high=2.0, counts=[0, 3, 1, 0], min=-0.9, max=0.4, mean=-0.2)
    )
    assert raw["bucket_limits"] == [-0.9, 0.0, 0.4] and raw["bucket_counts"] == [0, 3, 1]
    assert raw["num"] == 4 and raw["sum"] == pytest.approx(-0.8) and (raw["min"], raw["max"]) == (-0.9, 0.4)
    # from the centres -0.45 and 0.2, less Sheppard's correction for bins 1 wide
    assert raw["sum_squares"] == pytest.approx(3 * 0.45**2 + 0.2**2 - 4 / 12)
    # never below what the mean alone implies (all values equal)
    raw = tb.histogram_buckets(
        HistogramLogged(key="w", step=1, low=0.0, high=4.0, counts=[0, 0, 2, 0], min=2.5, max=2.5, mean=2.5)
    )
    assert raw["bucket_limits"] == [2.5, 2.5] and raw["sum_squares"] == pytest.approx(2 * 2.5**2)
    # values past the range were clamped into the end bins: those bins reach min and max
    raw = tb.histogram_buckets(
        HistogramLogged(key="w", step=1, low=0.0, high=1.0, counts=[2, 0, 0, 5], min=-3.0, max=9.0, mean=1.0)
    )
    assert raw["bucket_limits"] == [-3.0, 0.25, 0.5, 0.75, 9.0] and raw["bucket_counts"] == [0, 2, 0, 0, 5]
    assert tb.histogram_buckets(HistogramLogged(key="w", step=1, low=0.0, high=1.0, counts=[0, 0])) is None


def test_histogram_sum_squares_estimate_is_close_for_many_values():
    import torch

    from tuitrain.core.media import BINS, histogram_counts

    values = torch.randn(20000, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.2
    counts = histogram_counts([values], -2.0, 2.5).tolist()
    raw = tb.histogram_buckets(
        HistogramLogged(
            key="w", step=1, low=-2.0, high=2.5, counts=counts[:BINS], min=counts[-3], max=counts[-2], mean=counts[-1]
        )
    )
    assert raw["num"] == 20000
    assert raw["sum"] == pytest.approx(float(values.sum()), rel=1e-4)
    assert raw["sum_squares"] == pytest.approx(float((values.double() ** 2).sum()), rel=1e-3)


def test_code_block_fences_past_the_texts_own_backticks():
    assert tb.code_block("a\nb") == "```\na\nb\n```"
    assert tb.code_block("x ```` y") == "`````\nx ```` y\n`````"


def test_media_reach_the_writer(tmp_path, monkeypatch):
    class MediaWriter(FakeWriter):
        def __init__(self, log_dir):
            super().__init__(log_dir)
            self.calls = []

        def add_image(self, tag, img, global_step=None, walltime=None, dataformats="CHW"):
            self.calls.append(("image", tag, global_step, img.shape, dataformats))

        def add_text(self, tag, text, global_step=None, walltime=None):
            self.calls.append(("text", tag, global_step, text))

        def add_histogram_raw(self, tag, global_step=None, walltime=None, **raw):
            self.calls.append(("histogram", tag, global_step, raw["bucket_counts"]))

    monkeypatch.setattr(tb, "summary_writer_class", lambda: MediaWriter)
    _, events = media_events(tmp_path)
    sink = tb.TensorBoardSink(tmp_path)
    for e in events:
        sink(e)
    sink(MediaLogged(key="x", step=1, kind="image", path="../../etc/passwd"))
    assert sink.writer.calls == [
        ("image", "samples", 5, (6, 10, 3), "HWC"),
        ("text", "sample", 5, "````\ndef f():\n    return '```'\n````"),
        ("histogram", "weights/fc1", 5, [0, 3, 1]),
    ]
    assert sink.unread == 1  # the thinned-away file; the path outside the run is not even tried


def test_media_read_back_by_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    import io

    import numpy as np
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    img, events = media_events(tmp_path)
    sink = tb.TensorBoardSink(tmp_path)
    for e in events:
        sink(e)
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    (shown,) = acc.Images("samples")
    assert (shown.step, shown.width, shown.height) == (5, 10, 6)
    pixels = np.asarray(Image.open(io.BytesIO(shown.encoded_image_string)).convert("RGB"))
    assert np.array_equal(pixels, img.permute(1, 2, 0).numpy())
    (text,) = acc.Tensors("sample/text_summary")
    assert text.step == 5 and text.tensor_proto.string_val[0].decode() == "````\ndef f():\n    return '```'\n````"
    (hist,) = acc.Histograms("weights/fc1")
    h = hist.histogram_value
    assert hist.step == 5 and (h.min, h.max, h.num, h.sum) == (-0.9, 0.4, 4, -2.0)
    assert list(h.bucket_limit) == [-0.9, 0.0, 0.4] and list(h.bucket) == [0, 3, 1]
