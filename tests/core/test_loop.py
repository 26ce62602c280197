"""The training loop against hand computation: accumulation, clipping, schedulers, metrics.

The tests that take `test_device` run on TUITRAIN_TEST_DEVICE (the CPU by default; tests/conftest.py)."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tuitrain.core.events import MetricsLogged, PhaseCompleted, RunFinished
from tuitrain.core.learner import CoreLearner
from tuitrain.core.sections import Train


def data(n=10, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def linear(seed=0):
    torch.manual_seed(seed)
    return nn.Linear(3, 1)


def fit(model, ds, events=None, **kw):
    opt = kw.pop("optimizer", None) or torch.optim.SGD(model.parameters(), lr=0.1)
    cb = [lambda e, s: events.append(e)] if events is not None else []
    kw.setdefault("shuffle", False)
    kw.setdefault("device", "cpu")
    learner = CoreLearner(model, opt, loss_fn=nn.MSELoss(), callbacks=cb, **kw)
    result = learner.fit(ds)
    assert result.exit_code == 0, result.error
    return learner, result


def test_accumulation_equals_large_batch_including_partial_last_group(test_device):
    ds = data(n=10)
    # 10 samples, batches of 2, groups of 4 batches: 8 samples then a partial group of 2
    small, _ = fit(linear(), ds, batch_size=2, grad_accumulation=4, epochs=1, device=test_device)
    big, _ = fit(linear(), ds, batch_size=8, grad_accumulation=1, epochs=1, device=test_device)
    for a, b in zip(small.model.parameters(), big.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_accumulation_step_count():
    events = []
    learner, _ = fit(linear(), data(n=10), events, batch_size=2, grad_accumulation=4, epochs=2, log_every_n_steps=1)
    assert learner.state.step == 4  # ceil(5 / 4) = 2 steps per epoch
    steps = [e.step for e in events if isinstance(e, MetricsLogged) and e.scope == "step"]
    assert steps == [1, 2, 3, 4]


def test_clip_grad_norm_bounds_the_update(test_device):
    model = linear()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    fit(model, data(n=8), batch_size=8, epochs=1, clip_grad_norm=0.01, optimizer=opt, device=test_device)
    delta = torch.sqrt(sum(((p.detach().cpu() - b) ** 2).sum() for p, b in zip(model.parameters(), before)))
    assert delta.item() == pytest.approx(0.01, rel=1e-4)


@pytest.mark.parametrize("interval,expected_steps", [("step", 6), ("epoch", 3)])
def test_scheduler_interval(interval, expected_steps):
    model = linear()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    fit(
        model,
        data(n=4),
        batch_size=2,
        epochs=3,
        optimizer=opt,
        scheduler=sched,
        train=Train(scheduler_interval=interval),
    )
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5**expected_steps)


def test_epoch_metrics_weighted_by_batch_size(test_device):
    torch.manual_seed(0)
    x = torch.randn(7, 4)
    y = torch.tensor([0, 1, 2, 1, 0, 2, 2])
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # frozen: metrics are computable by hand
    events = []
    learner = CoreLearner(
        model,
        opt,
        loss_fn=nn.CrossEntropyLoss(),
        device=test_device,
        shuffle=False,
        batch_size=3,
        train_metrics=["loss", "accuracy", "top2_accuracy"],
        callbacks=[lambda e, s: events.append(e)],
    )
    assert learner.fit(TensorDataset(x, y)).exit_code == 0
    x, y = x.to(test_device), y.to(test_device)  # by hand on the device the model trained on
    with torch.no_grad():
        logits = model(x)
    want_loss = nn.functional.cross_entropy(logits, y, reduction="sum").item() / 7
    want_acc = (logits.argmax(1) == y).float().mean().item()
    want_top2 = (logits.topk(2, 1).indices == y[:, None]).any(1).float().mean().item()
    got = next(e for e in events if isinstance(e, PhaseCompleted) and e.split == "train").metrics
    assert got["loss"] == pytest.approx(want_loss, rel=1e-6)
    assert got["accuracy"] == pytest.approx(want_acc)
    assert got["top2_accuracy"] == pytest.approx(want_top2)


def test_step_metric_is_the_window_mean(test_device):
    ds = data(n=8)
    events = []
    fit(
        linear(),
        ds,
        events,
        batch_size=2,
        epochs=1,
        log_every_n_steps=2,
        train_metrics=["loss", "lr"],
        optimizer=None,
        device=test_device,
    )
    # by hand: plain SGD on the same model and batches (on the same device), each batch's loss taken
    # before its update
    model = linear().to(test_device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = (t.to(test_device) for t in ds.tensors)
    by_hand = []
    for i in range(0, 8, 2):
        loss = nn.functional.mse_loss(model(x[i : i + 2]), y[i : i + 2])
        by_hand.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert len(set(by_hand)) == 4  # distinct losses: a sum, a last value or a first value would differ
    logged = [e for e in events if isinstance(e, MetricsLogged) and e.scope == "step"]
    assert [e.step for e in logged] == [2, 4]
    assert all(e.metrics["lr"] == 0.1 for e in logged)
    assert [e.metrics["loss"] for e in logged] == pytest.approx(
        [(by_hand[0] + by_hand[1]) / 2, (by_hand[2] + by_hand[3]) / 2], rel=1e-6
    )


def test_validation_runs_without_gradients():
    seen = []

    class Probe(nn.Linear):
        def forward(self, x):
            seen.append((self.training, torch.is_grad_enabled()))
            return super().forward(x)

    torch.manual_seed(0)
    model = Probe(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    learner = CoreLearner(model, opt, loss_fn=nn.MSELoss(), device="cpu", batch_size=4, shuffle=False)
    ds = data(n=4)
    assert learner.fit(ds, ds).exit_code == 0
    assert seen == [(True, True), (False, False)]


def test_model_train_step_dict_and_user_dataloader(test_device):
    class Own(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            return self.lin(x)

        def train_step(self, batch):
            x, y = batch
            out = self(x)
            return {"loss": nn.functional.cross_entropy(out, y), "output": out, "target": y}

        valid_step = train_step

    torch.manual_seed(0)
    x, y = torch.randn(12, 3), torch.randint(0, 2, (12,))
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    model = Own()
    events = []
    learner = CoreLearner(
        model,
        torch.optim.AdamW(model.parameters()),
        device=test_device,
        seed=3,
        train_metrics=["loss", "accuracy"],
        valid_metrics=["accuracy"],
        callbacks=[lambda e, s: events.append(e)],
    )
    result = learner.fit(loader, loader)
    assert result.exit_code == 0
    fin = [e for e in events if isinstance(e, RunFinished)][0]
    assert set(fin.summary) == {"train/loss", "train/accuracy", "valid/accuracy"}


def test_max_steps_ends_run_midepoch():
    learner, result = fit(linear(), data(n=20), batch_size=2, epochs=5, max_steps=3)
    assert learner.state.step == 3 and result.reason == "max_steps" and result.status == "completed"


def test_nonfinite_loss_fails_and_names_step():
    class Bad(nn.Linear):
        calls = 0

        def forward(self, x):
            Bad.calls += 1
            out = super().forward(x)
            return out * float("nan") if Bad.calls == 3 else out

    torch.manual_seed(0)
    model = Bad(3, 1)
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
        device="cpu",
        batch_size=2,
        shuffle=False,
    )
    result = learner.fit(data(n=10))
    assert result.exit_code == 1 and result.status == "failed"
    assert "step 3" in result.error and "nan" in result.error


def test_user_exception_is_a_failed_result_not_a_raise():
    class Boom(nn.Linear):
        def forward(self, x):
            raise ValueError("bad shape")

    model = Boom(3, 1)
    learner = CoreLearner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.MSELoss(), device="cpu")
    result = learner.fit(data(n=4))
    assert (result.status, result.exit_code) == ("failed", 1)
    assert result.error == "ValueError: bad shape"


def test_print_in_user_code_becomes_output_events():
    from tuitrain.core.events import OutputPrinted

    class Talk(nn.Linear):
        def forward(self, x):
            print("hello from forward")
            return super().forward(x)

    model = Talk(3, 1)
    events = []
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
        device="cpu",
        batch_size=4,
        callbacks=[lambda e, s: events.append(e)],
        capture_output=True,
    )
    learner.fit(data(n=8))
    texts = [e.text for e in events if isinstance(e, OutputPrinted) and e.stream == "stdout"]
    assert texts == ["hello from forward"] * 2


def test_bf16_mixed_trains(test_device):
    model = linear()
    learner, result = fit(model, data(n=8), batch_size=4, epochs=1, precision="bf16-mixed", device=test_device)
    assert learner.precision.name == "bf16-mixed" and result.exit_code == 0


def test_the_gradient_scalers_own_overflow_is_not_a_nonfinite_fault():
    """float16's scaler overflows now and then (after it grows its scale): it skips that update and lowers
    the scale itself. With the [watch] rules at their defaults (nonfinite = "fail") and every step judged,
    the run trains on. A scaler on the CPU with a scale that overflows float32 at first stands in for
    CUDA's float16 one (16-mixed itself falls back to bf16 on a CPU)."""
    model = linear()
    events = []
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
        device="cpu",
        shuffle=False,
        batch_size=2,
        epochs=4,
        log_every_n_steps=1,
        train_metrics=["loss", "grad_norm"],
        callbacks=[lambda e, s: events.append(e)],
    )
    learner.precision.scaler = scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)
    before = model.weight.detach().clone()
    result = learner.fit(data())
    assert result.exit_code == 0 and result.status == "completed", result.error
    norms = [e.metrics["grad_norm"] for e in events if isinstance(e, MetricsLogged) and e.scope == "step"]
    overflowed = sum(1 for n in norms if not n < float("inf"))
    assert overflowed >= 1 and len(norms) == 20  # the scaler's overflows, every step logged
    assert scaler.get_scale() < 2.0**127 and not torch.equal(model.weight, before)  # it backed off and trained


def test_16_mixed_on_cpu_falls_back_with_warning():
    model = linear()
    with pytest.warns(UserWarning, match="bf16-mixed"):
        learner = CoreLearner(
            model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.MSELoss(), device="cpu", precision="16-mixed"
        )
    assert learner.precision.name == "bf16-mixed" and learner.scaler is None


def test_a_step_checkpoint_on_an_epoch_end_is_written_once(tmp_path, test_device):
    from tuitrain.core.checkpoint import Checkpointer
    from tuitrain.core.events import CheckpointSaved

    events = []
    ckpt = Checkpointer(tmp_path, every_n_steps=5, every_n_epochs=1, keep_last=10, monitor="train/loss")
    model = linear()
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
        device=test_device,
        batch_size=2,
        shuffle=False,
        epochs=3,
        checkpoint=ckpt,
        callbacks=[lambda e, s: events.append(e)],
    )
    assert learner.fit(data(n=10)).exit_code == 0  # 5 steps per epoch: every step checkpoint is an epoch end
    saved = [(e.step, e.reason) for e in events if isinstance(e, CheckpointSaved)]
    assert saved == [(5, "epoch"), (10, "epoch"), (15, "end")]


def test_epoch_started_after_a_midepoch_resume_names_the_epochs_first_step(tmp_path, test_device):
    from tuitrain.core.checkpoint import Checkpointer, latest_checkpoint
    from tuitrain.core.events import EpochStarted

    def make(callbacks=()):
        model = linear()
        return CoreLearner(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            loss_fn=nn.MSELoss(),
            device=test_device,
            batch_size=2,
            shuffle=False,
            epochs=2,
            grad_accumulation=2,
            seed=0,
            checkpoint=Checkpointer(tmp_path, every_n_steps=4),
            callbacks=list(callbacks),
        )

    # 20 samples, batch 2, accumulation 2: 5 steps per epoch; stop after step 7 (epoch 2, 2 steps in)
    stopper = make()
    stopper.bus.subscribe(lambda e, s: stopper.interrupter.request_stop() if getattr(e, "step", 0) == 7 else None)
    assert stopper.fit(data(n=20)).exit_code == 130
    events = []
    resumed = make([lambda e, s: events.append(e)])
    assert resumed.fit(data(n=20), resume=latest_checkpoint(tmp_path)).exit_code == 0
    started = [e for e in events if isinstance(e, EpochStarted)]
    assert [(e.epoch, e.step) for e in started] == [(2, 5)]


def test_the_plain_loop_and_the_general_loop_train_and_log_the_same(monkeypatch, exact_device):
    """Without per-step callbacks the common case runs Loop.plain_epoch; with one it runs the
    general loop. Same data, model and seed: bitwise the same parameters, logged values and counts."""
    from tuitrain.core import loop

    plain_calls = []
    original = loop.Loop.plain_epoch

    def spy(*args):
        plain_calls.append(1)
        return original(*args)

    monkeypatch.setattr(loop.Loop, "plain_epoch", spy)

    def run(per_step: bool):
        seen = []

        def record(event, state):
            if isinstance(event, (MetricsLogged, PhaseCompleted)):
                seen.append(event)

        record.step_events = per_step
        g = torch.Generator().manual_seed(3)
        ds = TensorDataset(torch.randn(22, 3, generator=g), torch.randint(0, 4, (22,), generator=g))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4))
        learner = CoreLearner(
            model,
            torch.optim.AdamW(model.parameters(), lr=0.01),
            loss_fn=nn.CrossEntropyLoss(),
            train_metrics=["loss", "lr"],
            valid_metrics=["loss", "accuracy"],
            callbacks=[record],
            device=exact_device,
            batch_size=4,
            epochs=2,
            seed=5,
            log_every_n_steps=2,
        )
        result = learner.fit(ds, ds)
        assert result.exit_code == 0, result.error
        logged = [(type(e).__name__, e.split, e.step, e.metrics, getattr(e, "items", None)) for e in seen]
        return [p.detach().clone() for p in model.parameters()], logged, learner.state

    calls_before = len(plain_calls)
    general_params, general_logged, general_state = run(per_step=True)
    assert len(plain_calls) == calls_before  # a per-step callback: the general loop
    plain_params, plain_logged, plain_state = run(per_step=False)
    assert len(plain_calls) == calls_before + 2  # one per epoch
    for a, b in zip(general_params, plain_params):
        assert torch.equal(a, b)
    assert plain_logged == general_logged
    assert [e for e in plain_logged if e[0] == "MetricsLogged" and e[1] == "train"][0][2] == 2
    assert (plain_state.step, plain_state.batch) == (general_state.step, general_state.batch) == (12, 0)
    assert plain_state.last.loss is not None and plain_state.last.target.shape[0] == 2  # the last, short batch


def test_fit_freezes_the_heap_while_training_and_unfreezes_it_after():
    """What exists when training starts is left out of the collector's passes, for the run only."""
    import gc

    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from tuitrain.core.events import MetricsLogged
    from tuitrain.core.learner import CoreLearner

    frozen_during = []

    def watch(event, state):
        if isinstance(event, MetricsLogged) and event.scope == "step":
            frozen_during.append(gc.get_freeze_count())

    before = gc.get_freeze_count()
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 3, generator=g), torch.randn(64, 1, generator=g))
    model = nn.Linear(3, 1)
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        loss_fn=nn.MSELoss(),
        device="cpu",
        batch_size=8,
        epochs=1,
        log_every_n_steps=2,
        callbacks=[watch],
    )
    assert learner.fit(ds).exit_code == 0
    assert frozen_during and min(frozen_during) > max(before, 1000)  # the model, torch, ... at least
    assert gc.get_freeze_count() == 0


def test_an_empty_validation_set_is_said_once_and_sections_may_be_dicts():
    """An empty validation set ran no batch and said nothing (no valid metrics, so checkpoint.monitor and
    early stopping never acted, in silence): now one line says so. `metrics={"valid": [...]}` as a dict is
    the Metrics section (it raised AttributeError: 'dict' object has no attribute 'train')."""
    from tuitrain.core.events import OutputPrinted

    events = []
    model = linear()
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
        callbacks=[lambda e, s: events.append(e)],
        metrics={"valid": ["loss"]},
        train={"epochs": 2, "device": "cpu"},
    )
    assert learner.fit(data(n=8), data(n=0)).exit_code == 0
    said = [e.text for e in events if isinstance(e, OutputPrinted) and "validation ran on no batch" in e.text]
    assert len(said) == 1 and "checkpoint.monitor" in said[0]
    assert not [e for e in events if isinstance(e, MetricsLogged) and e.split == "valid"]
    with pytest.raises(TypeError, match="Metrics has no field 'valdi'"):
        CoreLearner(model, None, metrics={"valdi": ["loss"]})
    with pytest.raises(TypeError, match="train= takes a Train or a dict of its fields, not int"):
        CoreLearner(model, None, train=3)
    said.clear()
    events.clear()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    learner = CoreLearner(model, sgd, loss_fn=nn.MSELoss(), callbacks=[lambda e, s: events.append(e)], epochs=1)
    assert learner.fit(data(n=8), data(n=4)).exit_code == 0  # a validation set with batches: nothing said
    assert not [e for e in events if isinstance(e, OutputPrinted) and "validation ran" in e.text]
