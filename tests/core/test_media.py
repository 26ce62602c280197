"""Samples and distributions (tuitrain/core/media.py, images.py): images made into PNG files a reader
(ours, Pillow) reads back pixel for pixel, batches as grids, large images shrunk; histograms that keep
their bins; files thinned evenly per name, across a resume; a writer that falls behind drops rather than
blocking; the Learner's `[log] samples` and `histograms` at their steps, in eval mode under no_grad."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tuitrain.core.events import HistogramLogged, MediaLogged, OutputPrinted
from tuitrain.core.images import MAX_SIDE, image_of, png_bytes, take_image
from tuitrain.core.media import BINS, QUEUE_LIMIT, MediaLog, safe_name, thin
from tuitrain.core.png import read_png


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_png_files_read_back_pixel_for_pixel(h, w, seed):
    img = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    width, height, rgb = read_png(png_bytes(img))
    assert (width, height) == (w, h)
    assert rgb == img.permute(1, 2, 0).contiguous().numpy().tobytes()


def test_pillow_reads_our_png_and_we_read_pillows_filtered_ones(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    np = pytest.importorskip("numpy")
    img = torch.randint(0, 256, (3, 17, 23), dtype=torch.uint8)
    (tmp_path / "a.png").write_bytes(png_bytes(img))
    assert np.array_equal(np.asarray(Image.open(tmp_path / "a.png")), img.permute(1, 2, 0).numpy())
    smooth = (np.add.outer(np.arange(40), np.arange(30)) % 256).astype("uint8")  # Pillow picks filters 1-4
    Image.fromarray(np.stack([smooth, smooth, 255 - smooth], -1)).save(tmp_path / "b.png")
    w, h, rgb = read_png((tmp_path / "b.png").read_bytes())
    assert (w, h) == (30, 40)
    assert rgb == np.asarray(Image.open(tmp_path / "b.png").convert("RGB")).tobytes()


def test_images_of_every_kind_become_one_rgb_image():
    np = pytest.importorskip("numpy")
    Image = pytest.importorskip("PIL.Image")
    grey = image_of(take_image(torch.full((5, 7), 0.5)))  # (H,W) floats in [0,1]
    assert grey.shape == (3, 5, 7) and set(grey.flatten().tolist()) == {128}
    batch = image_of(take_image(torch.rand(64, 3, 32, 32)))  # a batch: 8 x 8, 2 px apart
    assert batch.shape == (3, 8 * 32 + 7 * 2, 8 * 32 + 7 * 2)
    hwc = image_of(take_image(np.zeros((20, 30, 3), dtype="uint8") + 7))  # numpy is channels-last
    assert hwc.shape == (3, 20, 30) and int(hwc.max()) == 7
    pil = image_of(take_image(Image.new("RGB", (9, 4), (255, 0, 0))))
    assert pil.shape == (3, 4, 9) and pil[0].min() == 255 and pil[1].max() == 0
    listed = image_of(take_image([torch.zeros(3, 4, 4), torch.ones(1, 4, 4)]))
    assert listed.shape == (3, 4, 4 * 2 + 2)
    mixed = image_of(take_image([torch.ones(3, 2, 2), torch.ones(3, 4, 4)]))  # cells of the largest, top-left
    assert mixed.shape == (3, 4, 4 * 2 + 2) and mixed[:, :2, :2].min() == 255 and mixed[:, 2:, :4].max() == 0
    big = image_of(take_image(torch.rand(3, 1000, 700)))
    assert max(big.shape[1:]) == MAX_SIDE and big.shape[2] == round(700 * MAX_SIDE / 1000)
    clipped = image_of(take_image(torch.tensor([[[-1.0, 2.0, float("nan")]]])))
    assert clipped[0, 0].tolist() == [0, 255, 0]


def test_a_copy_is_taken_at_the_call():
    t = torch.zeros(3, 2, 2)
    copy = take_image(t)
    t += 1  # the loop goes on with its tensor
    assert int(image_of(copy).max()) == 0


def test_a_bad_image_is_refused_at_the_call():
    log = MediaLog(None, lambda e: None)
    with pytest.raises(ValueError, match="5 channels"):
        log.image(1, "x", torch.zeros(5, 6, 6))
    with pytest.raises(TypeError, match="not dict"):
        log.image(1, "x", {"a": 1})
    with pytest.raises(ValueError, match="a name"):
        log.text(1, "  ", "hi")


def test_names_are_safe_folders():
    assert safe_name("weights/fc1") == "weights/fc1"
    assert safe_name("../../etc/x y") == "_/_/etc/x_y"
    assert safe_name("/abs//a") == "abs/a"


@given(st.lists(st.integers(0, 10_000), min_size=0, max_size=60, unique=True), st.integers(2, 20))
def test_thinning_keeps_the_first_and_newest_and_as_many_as_asked(steps, keep):
    steps = sorted(steps)
    dropped = thin(steps, keep)
    kept = [s for s in steps if s not in dropped]
    assert len(kept) == min(len(steps), keep)
    if steps:
        assert kept[0] == steps[0] and kept[-1] == steps[-1]


def test_thinning_spreads_what_it_keeps_over_the_run():
    steps = list(range(0, 10_000, 50))
    kept = [s for s in steps if s not in thin(steps, 10)]
    gaps = [b - a for a, b in zip(kept, kept[1:])]
    assert max(gaps) <= 2 * min(gaps)


def written(events, kind=MediaLogged):
    return [e for e in events if isinstance(e, kind)]


def test_files_are_thinned_per_name_and_a_resume_goes_on_thinning(tmp_path):
    events = []
    log = MediaLog(tmp_path, events.append, keep=5)
    for step in range(0, 200, 10):
        log.text(step, "sample", f"text at {step}")
    log.image(7, "pictures/a b", torch.rand(3, 4, 4))
    log.close()
    files = sorted(int(p.stem) for p in (tmp_path / "media" / "sample").glob("*.txt"))
    assert len(files) == 5 and files[0] == 0 and files[-1] == 190
    assert [e.step for e in written(events)][:20] == list(range(0, 200, 10))
    assert written(events)[-1].path == "media/pictures/a_b/7.png"
    assert (tmp_path / "media/sample/190.txt").read_text() == "text at 190"
    assert written(events)[3].text == "text at 30"  # the words in the event: a reader needs no file
    again = MediaLog(tmp_path, events.append, keep=5)  # a resumed run: its files join the thinning
    for step in range(200, 260, 10):
        again.text(step, "sample", "later")
    again.close()
    files = sorted(int(p.stem) for p in (tmp_path / "media" / "sample").glob("*.txt"))
    assert len(files) == 5 and files[0] == 0 and files[-1] == 250


def test_histograms_keep_the_bins_of_their_first_step(tmp_path):
    events = []
    log = MediaLog(tmp_path, events.append)
    first = torch.linspace(-1, 1, 1001)
    log.histogram(1, "w", first)
    log.histogram(2, "w", first * 10)  # spread far past the first range: counted in the end bins
    log.histogram(3, "w", [torch.zeros(10), torch.ones(5)])  # several tensors counted together
    log.histogram(4, "w", torch.tensor([float("nan"), 0.5]))
    log.close()
    h = written(events, HistogramLogged)
    assert [(e.low, e.high) for e in h] == [(-2.0, 2.0)] * 4  # widened by half the span each side
    assert all(len(e.counts) == BINS for e in h)
    assert sum(h[0].counts) == 1001 and h[0].counts[0] == 0 and h[0].counts[-1] == 0
    assert h[1].counts[0] > 400 and h[1].counts[-1] > 400 and (h[1].min, h[1].max) == (-10.0, 10.0)
    assert sum(h[2].counts) == 15 and h[2].mean == pytest.approx(5 / 15)
    assert sum(h[3].counts) == 1  # NaN is not counted
    assert not list(tmp_path.glob("media/*"))  # histograms are events, not files


def test_under_deterministic_algorithms_a_gpu_histogram_counts_by_bincount_the_same_bins():
    """histc has no deterministic CUDA kernel (it raises under torch.use_deterministic_algorithms): there
    the bins are counted with bincount; here on the CPU, forced, against histc itself."""
    from tuitrain.core.media import _histc

    g = torch.Generator().manual_seed(0)
    for values, (low, high) in (
        (torch.randn(10000, generator=g), (-2.5, 3.0)),
        (torch.rand(5000, generator=g) * 7 - 1, (-1.0, 6.0)),
        (torch.tensor([-1.0, 0.0, 0.5, 1.0]), (-1.0, 1.0)),
    ):  # both edges
        v = values.clamp(low, high)
        want = torch.histc(v, bins=48, min=low, max=high)
        assert torch.equal(_histc(v, 48, low, high, deterministic=True), want)


def test_a_writer_that_falls_behind_drops_and_says_so_once(tmp_path):
    events = []
    log = MediaLog(tmp_path, events.append)
    gate = threading.Event()
    real = log._write
    log._write = lambda *a: (gate.wait(10), real(*a))
    for step in range(QUEUE_LIMIT + 6):
        log.text(step, "t", "x")  # never waits, however far behind the worker is
    gate.set()
    log.close()
    said = [e.text for e in events if isinstance(e, OutputPrinted)]
    assert len(said) == 1 and "behind" in said[0]
    assert log.dropped >= 5 and len(written(events)) + log.dropped == QUEUE_LIMIT + 6


def test_learner_logs_samples_and_histograms_at_their_steps(tmp_path):
    from tuitrain.core.learner import CoreLearner
    from tuitrain.core.sections import Log

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(128, 4)
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())
    seen, events = [], []

    def samples(m, step):
        seen.append((step, m.training, torch.is_grad_enabled()))
        return {"text": f"at {step}", "picture": torch.rand(2, 3, 4, 4)}

    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=torch.nn.CrossEntropyLoss(),
        epochs=2,
        batch_size=16,
        run_dir=tmp_path / "run",
        callbacks=[lambda e, s: events.append(e)],
        log=Log(
            samples={"target": samples, "every_n_steps": 5}, histograms=["weights", "grads"], histograms_every_n_steps=4
        ),
    )
    result = learner.fit(data)
    assert result.status == "completed"
    assert seen == [(5, False, False), (10, False, False), (15, False, False)]
    assert model.training  # back in training mode
    media = sorted((e.key, e.step) for e in written(events))
    assert media == sorted([(k, s) for k in ("text", "picture") for s in (5, 10, 15)])
    hists = {}
    for e in written(events, HistogramLogged):
        hists.setdefault(e.key, []).append(e.step)
    assert hists == {k: [4, 8, 12, 16] for k in ("weights/0", "weights/2", "grads/0", "grads/2")}
    w2 = [e for e in written(events, HistogramLogged) if e.key == "weights/2"][-1]
    assert sum(w2.counts) == 8 * 2 + 2
    assert w2.max == pytest.approx(float(torch.cat([p.detach().flatten() for p in model[2].parameters()]).max()))
    assert events[-1].name == "RunFinished"  # everything logged is said before the end
    assert (tmp_path / "run/media/picture/15.png").exists()
