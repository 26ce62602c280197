"""Streaming data that keeps its own position (`state_dict()`/`load_state_dict()`) resumes mid-epoch
exactly: the checkpoint holds the position, and a resumed run's per-step losses are bitwise the same."""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.utils.data import IterableDataset

import tuitrain
from tuitrain.core.checkpoint import load_checkpoint, read_index
from tuitrain.core.events import MetricsLogged


class Stream(IterableDataset):
    """A stream of 100 items made from their index; its position is its state."""

    def __init__(self, n: int = 100, stateful: bool = True) -> None:
        self.n, self.pos = n, 0
        if not stateful:
            self.state_dict = self.load_state_dict = None

    def __iter__(self):
        while self.pos < self.n:
            i = self.pos
            self.pos += 1
            x = torch.sin(torch.arange(4.0) * (i + 1))
            yield x, int(x.sum() > 0)
        self.pos = 0  # the next epoch reads it again from the start

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))

    def forward(self, x):
        return self.net(x)


def _fit(run_dir, stream, stop_at=0, resume=None):
    torch.manual_seed(0)
    model = Net()
    losses = {}
    learner = tuitrain.Learner(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        loss_fn=nn.CrossEntropyLoss(),
        batch_size=8,
        epochs=3,
        run_dir=run_dir,
        log_every_n_steps=1,
        seed=3,
    )

    def record(event, state):
        if isinstance(event, MetricsLogged) and event.split == "train" and event.scope == "step":
            losses[event.step] = event.metrics["loss"]
            if event.step == stop_at:
                learner.interrupter.request_stop("test")

    learner.bus.subscribe(record, steps=False, batched=False)
    result = learner.fit(stream, resume=resume, dashboard=False)
    return result, losses


def test_a_stateful_stream_resumes_mid_epoch_bitwise(tmp_path):
    _, expected = _fit(tmp_path / "ref", Stream())
    assert len(expected) == 3 * 13  # 100 items in batches of 8: 13 steps an epoch
    stopped, first = _fit(tmp_path / "run", Stream(), stop_at=18)  # mid-epoch 2
    assert stopped.status == "interrupted"
    last = read_index(tmp_path / "run" / "checkpoint")[-1]
    data = load_checkpoint(tmp_path / "run" / "checkpoint" / last.file)
    assert data["stage"] == "train" and data["batch"] == 5 and data["data"] == {"pos": 40}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "the epoch restarts" warning: it continues
        result, resumed = _fit(tmp_path / "run", Stream(), resume=tmp_path / "run" / "checkpoint" / last.file)
    assert result.status == "completed"
    both = {**first, **resumed}
    assert sorted(both) == sorted(expected)
    assert {s: v for s, v in both.items() if v != expected[s]} == {}


def test_a_stream_without_a_position_restarts_its_epoch_and_says_so(tmp_path):
    stopped, _ = _fit(tmp_path / "run", Stream(stateful=False), stop_at=18)
    last = read_index(tmp_path / "run" / "checkpoint")[-1]
    assert load_checkpoint(tmp_path / "run" / "checkpoint" / last.file)["data"] is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, _ = _fit(tmp_path / "run", Stream(stateful=False), resume=tmp_path / "run" / "checkpoint" / last.file)
    assert result.status == "completed"
    assert any("the epoch restarts from its first batch" in str(w.message) for w in caught)
