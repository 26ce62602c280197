"""The `zero_grads` rule (tuitrain/core/rules/zero_grads.py): a rule added in one file, taken by `Watch`,
the config's `[watch]` table, the Learner and `Monitor` from the registry. Values in, verdicts out; then
real training whose forward pass rounds its output (every gradient 0), in a Learner and in a loop of
one's own."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from tests.conftest import Clock, read_events
from tuitrain.config import ConfigError, config_from_dict
from tuitrain.core.health import Health, Watch


def test_three_zero_norms_in_a_row_are_one_episode_and_a_norm_above_0_ends_it():
    clock = Clock()
    health = Health(Watch.of({"zero_grads_steps": 3}), clock=clock)
    norms = [1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0] + [0.0] * 3
    said = []
    for step, v in enumerate(norms, 1):
        clock.now += 61  # a minute apart: the once-a-minute limit out of the way
        verdict = health.grads(v, step)
        if verdict is not None:
            said.append((step, verdict.rule, verdict.action, verdict.episode))
    assert said == [(7, "zero_grads", "alert", 1), (13, "zero_grads", "alert", 2)]
    assert health.grads(0.0, 14) is None  # the episode goes on, quietly
    assert health.spikes["zero_grads"] == 5  # steps 7, 8, 9, 13 and 14 found; said once an episode


def test_off_judges_nothing_and_a_wrong_value_is_named():
    health = Health(Watch.of({"zero_grads": "off"}))
    assert all(health.grads(0.0, s) is None for s in range(10))
    with pytest.raises(ValueError, match=r"watch\.zero_grads: expected one of 'off', 'alert', 'stop'"):
        Watch.of({"zero_grads": "skip"})
    with pytest.raises(ValueError, match=r"watch\.zero_grads_steps: expected a whole number of 1 or more"):
        Watch.of({"zero_grads_steps": 0})


def test_the_config_table_takes_its_keys_and_names_a_wrong_one(tmp_path):
    table = {"model": {"target": "m:f"}, "data": {"target": "d:f"}, "watch": {"zero_grads": "stop"}}
    cfg = config_from_dict(table)
    assert cfg.watch.zero_grads == "stop" and cfg.watch.zero_grads_steps == 3
    assert cfg.to_dict()["watch"]["zero_grads"] == "stop"
    with pytest.raises(ConfigError, match=r"watch\.zero_grads: expected one of"):
        config_from_dict({**table, "watch": {"zero_grads": "rollback"}})


class Rounded(nn.Module):
    """A regression whose forward rounds its output: the loss no longer moves with the weights."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x):
        return torch.round(self.linear(x))


def _data(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))


def test_a_learner_whose_forward_rounds_stops_on_the_rule(tmp_path):
    from tuitrain import Learner

    torch.manual_seed(0)
    model = Rounded()
    learner = Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
        train_metrics=("loss", "grad_norm"),
        epochs=1,
        batch_size=16,
        log_every_n_steps=2,
        device="cpu",
        run_dir=tmp_path / "run",
        watch={"zero_grads": "stop"},
    )
    result = learner.fit(_data(), _data(64))
    assert result.status == "interrupted"
    raised = [e for e in read_events(tmp_path / "run") if e["event"] == "AlertRaised"]
    assert [(a["rule"], a["action"], a["step"]) for a in raised] == [("zero_grads", "stop", 6)]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"


def test_a_monitor_alerts_on_the_zero_norms_it_is_given(tmp_path):
    from tuitrain import Monitor

    torch.manual_seed(0)
    model = Rounded()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data(64).tensors
    with Monitor("rounded", run_dir=tmp_path / "run", dashboard=False) as mon:
        for step in range(1, 6):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            opt.step()
            mon.log(step, loss=loss.detach(), grad_norm=norm)
    raised = [e for e in read_events(tmp_path / "run") if e["event"] == "AlertRaised"]
    assert [(a["rule"], a["action"], a["step"], a["value"]) for a in raised] == [("zero_grads", "alert", 3, 0.0)]
