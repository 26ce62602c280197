"""tflops, mfu and max_memory: FlopCounterMode's count against a hand count, the count of a real run's
first batch, the peak table, and training left unchanged (from a config file, the metrics in a run and
the config errors: tests/run/test_flops_from_a_config.py). The tests that take `test_device` run on
TUITRAIN_TEST_DEVICE (the CPU by default; tests/conftest.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset
from torch.utils.flop_counter import FlopCounterMode

from tuitrain.core.events import MetricsLogged
from tuitrain.core.flops import PEAK_TFLOPS, StepFlops, peak_tflops_of
from tuitrain.core.learner import CoreLearner
from tuitrain.core.sections import Train
from tuitrain.core.phases import CustomTrainPhase

SIZES = (4, 256, 256, 3)  # a small first layer: its input needs no gradient, 6NB counts it anyway


def mlp(sizes=SIZES, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)]
    return nn.Sequential(*layers[:-2])


def hand_count(sizes, batch):
    """Forward 2NB, backward 4NB, less the first layer's input gradient (its input needs none)."""
    weights = [a * b for a, b in zip(sizes, sizes[1:])]
    return 6 * sum(weights) * batch - 2 * weights[0] * batch


def test_flop_counter_matches_6nb_for_an_mlp():
    model, batch = mlp(), 32
    x, y = torch.randn(batch, SIZES[0]), torch.randint(0, SIZES[-1], (batch,))
    with FlopCounterMode(display=False) as fc:
        nn.functional.cross_entropy(model(x), y).backward()
    n = sum(a * b for a, b in zip(SIZES, SIZES[1:]))  # weights, not biases (a bias add is not a matmul FLOP)
    assert fc.get_total_flops() == pytest.approx(6 * n * batch, rel=0.02)
    assert fc.get_total_flops() == hand_count(SIZES, batch)


def data(n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, SIZES[0], generator=g), torch.randint(0, SIZES[-1], (n,), generator=g))


def fit(metrics, *, dropout=0.3, accum=1, epochs=2, device="cpu", model=None, **kw):
    model = model if model is not None else mlp(dropout=dropout)
    events = []
    learner = CoreLearner(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        loss_fn=nn.CrossEntropyLoss(),
        device=device,
        train_metrics=metrics,
        epochs=epochs,
        batch_size=16,
        seed=3,
        grad_accumulation=accum,
        log_every_n_steps=1,
        callbacks=[lambda e, s: events.append(e)],
        **kw,
    )
    result = learner.fit(data())
    assert result.exit_code == 0, result.error
    logged = [e for e in events if isinstance(e, MetricsLogged) and e.scope == "step" and e.split == "train"]
    return learner, logged


def no_counting_left():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode() is None and not torch.nn.modules.module._global_forward_pre_hooks


@pytest.mark.parametrize("accum", [1, 3])
def test_first_batch_counted_times_accumulation(accum, test_device):
    learner, logged = fit(["loss", "tflops", "step_time"], accum=accum, device=test_device)
    assert learner._step_flops.flops == hand_count(SIZES, 16) * accum
    for e in logged:  # tflops = FLOPs per step / seconds per step, over the same window
        m = e.metrics
        assert math.isfinite(m["tflops"]) and m["tflops"] > 0
        assert m["tflops"] == pytest.approx(learner._step_flops.flops / m["step_time"] / 1e12, rel=1e-9)
    assert no_counting_left()


@pytest.mark.parametrize("accum", [1, 2])
def test_counting_does_not_change_training(accum, exact_device):
    """Dropout draws random numbers: the counted batch must draw exactly what it would have."""
    a, with_metrics = fit(
        ["loss", "tflops", "mfu", "max_memory"], accum=accum, train=Train(peak_tflops=1.0), device=exact_device
    )
    b, without = fit(["loss"], accum=accum, device=exact_device)
    assert [e.step for e in with_metrics] == [e.step for e in without]
    assert [e.metrics["loss"] for e in with_metrics] == [e.metrics["loss"] for e in without]
    for p, q in zip(a.raw_model.parameters(), b.raw_model.parameters()):
        assert torch.equal(p, q)


def test_flops_per_step_given_is_used_as_is():
    learner, logged = fit(
        ["loss", "tflops", "mfu", "step_time"], train=Train(flops_per_step=2.5e9, peak_tflops=0.5), epochs=1
    )
    assert learner._step_flops is None  # nothing counted
    for e in logged:
        m = e.metrics
        assert m["tflops"] == pytest.approx(2.5e9 / m["step_time"] / 1e12, rel=1e-9)
        assert m["mfu"] == pytest.approx(m["tflops"] / 0.5 * 100, rel=1e-12)


def test_manual_phase_counts_the_whole_step(test_device):
    """A CustomTrainPhase with two models: one step is both models' forward and backward."""

    class TwoModels(CustomTrainPhase):
        def step(self, learner, batch):
            x, y = batch
            learner.zero_grad()
            loss_a = nn.functional.cross_entropy(learner.models["a"](x), y)
            learner.backward(loss_a)
            learner.step_optimizer("a")
            loss_b = nn.functional.cross_entropy(learner.models["b"](x), y)
            learner.backward(loss_b)
            learner.step_optimizer("b")
            return {"loss": loss_a + loss_b}

    a, b = mlp(seed=1), mlp(sizes=(4, 64, 3), seed=2)
    opts = {"a": torch.optim.SGD(a.parameters(), lr=0.1), "b": torch.optim.SGD(b.parameters(), lr=0.1)}
    learner = CoreLearner(
        {"a": a, "b": b},
        opts,
        device=test_device,
        train_metrics=["loss", "tflops"],
        epochs=1,
        batch_size=16,
        train_phase=TwoModels(),
        log_every_n_steps=2,
    )
    assert learner.fit(data()).exit_code == 0
    assert learner._step_flops.flops == hand_count(SIZES, 16) + hand_count((4, 64, 3), 16)
    assert no_counting_left()


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="torch.compile is not supported here")
def test_a_compiled_model_is_counted_forward_and_backward(test_device):
    """A hook inside the compiled call would see the forward only: the call itself is watched."""
    model = mlp(dropout=0.3).to(test_device)
    model.compile(backend="aot_eager")
    counter = StepFlops([model], [], position=lambda: (1, 0))
    counter.watch()
    model(torch.randn(16, SIZES[0]).to(test_device)).sum().backward()
    assert counter.per_step() == hand_count(SIZES, 16)
    assert no_counting_left()


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="torch.compile is not supported here")
def test_a_torch_compile_wrapper_is_counted_without_a_global_hook():
    import warnings

    model = torch.compile(mlp(dropout=0.3), backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns of global hooks around a torch.compile(m) wrapper
        learner, _ = fit(["loss", "tflops"], model=model, epochs=1)
    assert learner._step_flops.flops == hand_count(SIZES, 16)
    assert no_counting_left()


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="torch.compile is not supported here")
def test_a_run_with_a_compiled_model(test_device):
    model = mlp(dropout=0.3)
    model.compile(backend="aot_eager")
    compiled = model._compiled_call_impl
    learner, logged = fit(["loss", "tflops"], model=model, epochs=1, device=test_device)
    assert learner._step_flops.flops == hand_count(SIZES, 16)
    assert model._compiled_call_impl is compiled and no_counting_left()
    assert all(e.metrics["tflops"] > 0 for e in logged)


class Wrapped(nn.Module):
    """A model of the user's own (dynamo passes over a bare nn.Sequential compiled in place)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = mlp(dropout=0.3)

    def forward(self, x):
        return self.body(x)


@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="torch.compile is not supported here")
@pytest.mark.parametrize("how", ["in place", "wrapper"])
def test_a_compiled_model_counted_for_tflops_still_trains_compiled(how, test_device):
    """The counted batch runs uncompiled: a first compiled call under FlopCounterMode would leave dynamo
    passing over the model for good (the run would train uncompiled, silently)."""
    graphs = []

    def backend(gm, example_inputs):  # a backend that counts what dynamo hands it
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    model = Wrapped()
    if how == "in place":
        model.compile(backend=backend)
    else:
        model = torch.compile(model, backend=backend)
    calls = {k: vars(model).get(k) for k in ("forward", "_compiled_call_impl")}  # the compiled calls
    learner, logged = fit(["loss", "tflops"], model=model, epochs=1, device=test_device)
    assert learner._step_flops.flops == hand_count(SIZES, 16)
    assert graphs, "the model was never compiled"
    assert all(vars(model).get(k) is call for k, call in calls.items())  # given back
    assert no_counting_left() and all(e.metrics["tflops"] > 0 for e in logged)


@pytest.mark.device  # in the device run (benchmarks/gpu/run.sh) too
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_count_the_table_and_peak_memory():
    known = peak_tflops_of(torch.cuda.get_device_name())
    peak = {} if known else {"peak_tflops": 100.0}
    learner, logged = fit(["loss", "tflops", "mfu", "max_memory"], device="cuda", precision="bf16-mixed", **peak)
    assert learner._step_flops.flops == hand_count(SIZES, 16)
    for e in logged:
        m = e.metrics
        assert m["max_memory"] > 0 and m["tflops"] > 0
        assert m["mfu"] == pytest.approx(m["tflops"] / (known or 100.0) * 100, rel=1e-12)
    assert no_counting_left()


def test_max_memory_and_phase_values(test_device):
    learner, logged = fit(["loss", "max_memory", "tflops"], epochs=1, device=test_device)
    if test_device == "cpu":
        floor = 1e6  # the RSS on a CPU: megabytes at least
    else:  # CUDA: the bytes allocated at the peak of each step, with at least the float32 weights, their
        # gradients and AdamW's two moments (1.1 MB here)
        floor = 4 * 4 * sum(p.numel() for p in learner.raw_model.parameters())
    assert all(e.metrics["max_memory"] > floor for e in logged)
    epoch = learner.state.history
    assert epoch["train/max_memory"][0][1] >= max(e.metrics["max_memory"] for e in logged)
    assert epoch["train/tflops"][0][1] > 0


def test_mfu_needs_a_peak_on_a_cpu():
    with pytest.raises(ValueError, match="peak_tflops"):
        CoreLearner(mlp(), torch.optim.SGD(mlp().parameters(), lr=0.1), device="cpu", train_metrics=["mfu"])
    for bad in (-1.0, float("nan"), "1", True):
        with pytest.raises(ValueError, match="flops_per_step"):
            CoreLearner(
                mlp(), torch.optim.SGD(mlp().parameters(), lr=0.1), device="cpu", train=Train(flops_per_step=bad)
            )


def test_step_flops_watches_only_while_training():
    """Made but never trained (or between phases), it leaves other models alone."""
    model = mlp()
    learner = CoreLearner(model, torch.optim.SGD(model.parameters(), lr=0.1), device="cpu", train_metrics=["tflops"])
    assert isinstance(learner._step_flops, StepFlops) and not learner._step_flops.watching
    model(torch.randn(2, SIZES[0])).sum().backward()
    assert learner._step_flops.flops is None and no_counting_left()


@pytest.mark.parametrize(
    "name,peak",
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA A10G", 125.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA GeForce RTX 4090", 165.2),
        ("Tesla V100-SXM2-16GB", 125.0),
        ("Tesla T4", 65.0),
        ("NVIDIA B200", 2250.0),
        ("AMD Instinct MI300X", 1307.4),
        ("NVIDIA GeForce GTX 1080", None),
        ("Intel(R) Xeon(R) CPU", None),
    ],
)
def test_peak_table(name, peak):
    assert peak_tflops_of(name) == peak
    assert all(p > 0 for _, p in PEAK_TFLOPS)
