"""EMA weights: an exponential moving average of the weights, updated after each optimizer step,
validated with, checkpointed, resumed exactly, and what model.pt holds. The tests that take
`test_device` or `exact_device` run on TUITRAIN_TEST_DEVICE (the CPU by default; tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tuitrain
from tuitrain.core.sections import Train
from tuitrain.core.checkpoint import load_checkpoint, read_index
from tuitrain.core.ema import WeightAverage
from tuitrain.core.events import MetricsLogged


def _data(n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _fit(run_dir, epochs=4, stop_at=0, resume=None, decay=0.9, device="auto"):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    learner = tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.2),
        loss_fn=nn.CrossEntropyLoss(),
        batch_size=8,
        epochs=epochs,
        run_dir=run_dir,
        log_every_n_steps=1,
        seed=1,
        train=Train(ema_decay=decay, device=device),
    )
    valid = {}

    def record(event, state):
        if isinstance(event, MetricsLogged) and event.scope == "epoch" and event.split == "valid":
            valid[event.epoch] = event.metrics["loss"]
        if isinstance(event, MetricsLogged) and event.split == "train" and event.step == stop_at:
            learner.interrupter.request_stop("test")

    learner.bus.subscribe(record, steps=False, batched=False)
    result = learner.fit(_data(), _data(16, 1), resume=resume, dashboard=False)
    return learner, result, valid


def test_the_average_follows_each_step_and_validation_and_model_pt_use_it(tmp_path, test_device):
    learner, result, valid = _fit(tmp_path / "run", device=test_device)
    assert result.status == "completed"
    ema = learner.ema
    assert ema.updates == 4 * 6  # one per optimizer step
    live = learner.raw_model.state_dict()
    saved = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    for k, v in ema.average.items():
        assert torch.equal(saved[k], v.cpu())  # model.pt: the averaged weights (on the CPU)
    w = "0.weight"
    assert not torch.equal(ema.average[w], live[w])  # the model trains on its own weights
    # validation ran on the average: the same loss as the averaged model on the valid data
    model = learner.raw_model
    with ema.swapped_in():
        model.eval()
        x, y = (t.to(test_device) for t in _data(16, 1).tensors)
        loss = nn.CrossEntropyLoss()(model(x), y).item()
    assert valid[4] == pytest.approx(loss, rel=1e-6)
    assert torch.equal(learner.raw_model.state_dict()[w], live[w])  # swapped back


def test_a_run_with_ema_resumes_exactly(tmp_path, exact_device):
    _, _, expected = _fit(tmp_path / "ref", device=exact_device)
    _, stopped, _ = _fit(tmp_path / "run", stop_at=9, device=exact_device)  # mid-epoch 2
    assert stopped.status == "interrupted"
    ckpt = tmp_path / "run" / "checkpoint" / read_index(tmp_path / "run" / "checkpoint")[-1].file
    assert load_checkpoint(ckpt)["ema"]["updates"] == 9
    _, result, resumed = _fit(tmp_path / "run", resume=ckpt, device=exact_device)
    assert result.status == "completed"
    assert resumed == {e: expected[e] for e in resumed} and 4 in resumed
    ref = torch.load(tmp_path / "ref" / "model.pt", weights_only=True)
    out = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    assert all(torch.equal(ref[k], out[k]) for k in ref)


@pytest.mark.parametrize("decay", [0.5, 0.9])
def test_the_average_is_decay_times_itself_plus_the_rest_times_the_new_weights(tmp_path, decay, test_device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    after_each_step = []  # the model's state after every optimizer step (on the CPU), read by a hook of our own
    opt.register_step_post_hook(
        lambda *_: after_each_step.append({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
    )
    learner = tuitrain.Learner(
        model,
        opt,
        loss_fn=nn.CrossEntropyLoss(),
        batch_size=8,
        epochs=2,
        run_dir=tmp_path / "run",
        seed=1,
        train=Train(ema_decay=decay, device=test_device),
    )
    assert learner.fit(_data(), dashboard=False).status == "completed"
    # by hand, in float64: avg <- decay * avg + (1 - decay) * weights; integer buffers are copied
    avg = {k: v.double() if v.is_floating_point() else v for k, v in start.items()}
    for weights in after_each_step:
        avg = {
            k: decay * a + (1 - decay) * weights[k].double() if a.is_floating_point() else weights[k]
            for k, a in avg.items()
        }
    assert len(after_each_step) == learner.ema.updates == 2 * 6
    assert learner.ema.average.keys() == avg.keys()
    for k, want in avg.items():
        torch.testing.assert_close(learner.ema.average[k].to("cpu", want.dtype), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 2])
def test_a_decay_outside_0_1_is_refused(decay):
    with pytest.raises(ValueError, match="between 0 and 1"):
        WeightAverage(nn.Linear(2, 2), decay)
