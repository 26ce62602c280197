"""CUDA paths (issue 31 item 7), marked `cuda` and skipped without a GPU: mixed precision with and
without the gradient scaler (and a health rule skipping a step under the scaler), NVML device samples,
the peak table, and no hidden host-device syncs on the steps that log nothing, every rule on.

    python -m pytest -m cuda tests/cuda      # on a machine with a GPU
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import read_events
from tests.health.test_health import project  # noqa: F401 (the fixture: healthproj in a folder of its own)

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def train(config: Path, *sets: str):
    from tuitrain.run.runner import prepare_run

    run = prepare_run(config, ["train.device=cuda", *sets])
    code = run.execute()
    return code, run.run_dir, read_events(run.run_dir)


def losses(events: list[dict]) -> list[float]:
    return [
        e["metrics"]["loss"]
        for e in events
        if e["event"] == "MetricsLogged" and e["scope"] == "step" and e["split"] == "train"
    ]


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_trains_on_cuda(project, precision):
    code, run_dir, events = train(project, f"train.precision={precision}", "train.epochs=2")
    assert code == 0
    seen = losses(events)
    assert all(math.isfinite(v) for v in seen) and seen[-1] < seen[0]
    weights = torch.load(run_dir / "model.pt")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_a_spike_is_skipped_under_the_gradient_scaler(project):
    """16-mixed on CUDA has a GradScaler: a skipped step leaves it consistent (the next steps train)."""
    code, run_dir, events = train(
        project,
        "train.precision=16-mixed",
        "data.scale_batch=100",
        "watch.loss_spike=skip",
        "watch.grad_spike=skip",
        "log.every_n_steps=1",
    )
    assert code == 0
    skipped = [e for e in events if e["event"] == "StepSkipped"]
    assert skipped and skipped[0]["step"] == 101
    assert math.isfinite(losses(events)[-1])


def test_nvml_device_samples_name_each_gpu(project, monkeypatch):
    pytest.importorskip("pynvml", reason="nvidia-ml-py is an optional extra")
    monkeypatch.setenv("TUITRAIN_DEVICES_INTERVAL", "0.2")
    code, _, events = train(project, "data.slow=0.001", "train.max_steps=300")
    assert code == 0
    samples = [e for e in events if e["event"] == "DevicesSampled"]
    assert samples
    gpus = samples[-1]["gpus"]
    assert len(gpus) == torch.cuda.device_count()
    assert all(0 <= g["util"] <= 100 and 0 < g["mem_used"] <= g["mem_total"] for g in gpus)


def test_the_peak_table_knows_this_gpu():
    from tuitrain.core.flops import peak_tflops_of

    name = torch.cuda.get_device_name()
    peak = peak_tflops_of(name)
    if peak is None:
        pytest.skip(f"{name} is not in the table (give train.peak_tflops)")
    assert 10 < peak < 5000


def test_no_hidden_syncs_on_steps_that_log_nothing(project):
    """torch's sync debug mode warns at every host-device sync: with every [watch] rule on, they come on
    the steps that log (before the update, the rules; after it, the log), never between."""
    from tuitrain.core.callbacks import EventBus
    from tuitrain.core.control import Interrupter
    from tuitrain.run.build import build_learner
    from tuitrain.run.runner import prepare_run

    run = prepare_run(
        project,
        [
            "train.device=cuda",
            "watch.loss_spike=skip",
            "watch.grad_spike=skip",
            "watch.nonfinite=skip",
            'metrics.train=["loss"]',
            "train.max_steps=60",
            "checkpoint.every_n_steps=0",
            "log.every_n_steps=10",
        ],
    )
    learner, train_loader, _ = build_learner(run.cfg, run.run_dir, EventBus(), Interrupter())
    syncs: list[int] = []
    real = warnings.showwarning

    def record(message, category, *args, **kwargs):
        if "synchroniz" in str(message).lower():
            syncs.append(learner.state.step)
        else:
            real(message, category, *args, **kwargs)

    warnings.showwarning = record
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            result = learner.fit(train_loader, None)
    finally:
        torch.cuda.set_sync_debug_mode(0)
        warnings.showwarning = real
    assert result.status == "completed", result.error
    every = learner.log_every_n_steps
    late = sorted({s for s in syncs[5:] if s % every not in (0, every - 1)})  # the first steps set up
    assert not late, late


def test_media_from_cuda_tensors_are_the_cpu_ones_and_sync_only_at_a_names_first_histogram(tmp_path):
    """log_image copies into pinned memory with non_blocking (the worker waits for the copy's event);
    log_histogram counts on the GPU: the same pixels and counts as from the CPU, and after a name's
    first call (its range) no sync on the caller's thread."""
    from tuitrain.core.events import HistogramLogged, MediaLogged
    from tuitrain.core.media import MediaLog

    torch.manual_seed(0)
    images, values = torch.rand(16, 3, 8, 8), torch.randn(100_000)
    out = {}
    for device in ("cpu", "cuda"):
        events = []
        log = MediaLog(tmp_path / device, events.append)
        log.histogram(1, "w", values.to(device))  # the first: its range read back (one sync)
        doubled = (values * 2).to(device)  # (a blocking copy from pageable memory syncs: the test's, not ours)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error" if device == "cuda" else 0)
        try:
            log.image(2, "x", images.to(device, non_blocking=True) if device == "cuda" else images)
            log.histogram(3, "w", doubled)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        log.close()
        out[device] = (
            (tmp_path / device / "media/x/2.png").read_bytes(),
            [e.counts for e in events if isinstance(e, HistogramLogged)],
            [e.path for e in events if isinstance(e, MediaLogged)],
        )
    assert out["cuda"][0] == out["cpu"][0]
    assert out["cuda"][2] == out["cpu"][2] == ["media/x/2.png"]
    for cpu, gpu in zip(out["cpu"][1], out["cuda"][1]):  # histc on a GPU may put a value at an edge apart
        assert sum(cpu) == sum(gpu) and sum(abs(a - b) for a, b in zip(cpu, gpu)) <= 4


def test_histograms_on_cuda_under_deterministic_algorithms(tmp_path):
    """histc raises on CUDA under torch.use_deterministic_algorithms: the counts come from a sort there,
    the same bins as histc's without it."""
    from tuitrain.core.events import HistogramLogged
    from tuitrain.core.media import MediaLog

    torch.manual_seed(0)
    values = torch.randn(100_000, device="cuda")
    got = {}
    for deterministic in (False, True):
        events = []
        log = MediaLog(tmp_path / str(deterministic), events.append)
        torch.use_deterministic_algorithms(deterministic)
        try:
            log.histogram(1, "w", values)
            log.histogram(2, "w", values * 2)
        finally:
            torch.use_deterministic_algorithms(False)
        log.close()
        got[deterministic] = [e.counts for e in events if isinstance(e, HistogramLogged)]
    assert len(got[True]) == 2
    for a, b in zip(got[False], got[True]):
        assert sum(a) == sum(b) == 100_000 and sum(abs(x - y) for x, y in zip(a, b)) <= 4
