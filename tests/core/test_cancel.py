"""Cancelling from a user's train_step with the typed exceptions (core/state.py, re-exported by
core/phases.py and tuitrain): CancelStep skips that batch, CancelEpoch ends the epoch, CancelFitting
ends training. Expected weights come from a plain SGD loop over the batches that were not cancelled."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain.core import phases, state
from tuitrain.core.events import PhaseCompleted
from tuitrain.core.learner import CoreLearner

BATCHES = 4  # 8 samples in batches of 2, not shuffled


def _data():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g))


class Cancelling(nn.Linear):
    """A linear model whose train_step raises `error` at its `at`-th call (counted from 1)."""

    def __init__(self, error: type[Exception] | None, at: int):
        torch.manual_seed(0)
        super().__init__(3, 1)
        self.error, self.at, self.calls = error, at, 0

    def train_step(self, batch):
        self.calls += 1
        if self.calls == self.at:
            raise self.error("from the test") if self.error is state.CancelFitting else self.error()
        x, y = batch
        return {"loss": nn.functional.mse_loss(self(x), y)}


def _fit(error, at, epochs=2):
    model = Cancelling(error, at)
    events = []
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        device="cpu",
        batch_size=2,
        shuffle=False,
        epochs=epochs,
        train_metrics=["loss"],
        callbacks=[lambda e, s: events.append(e)],
    )
    return model, learner.fit(_data()), events


def _by_hand(batches: list[int]):
    """Plain SGD over the given batch indexes (in order); the losses before each update."""
    model = Cancelling(None, 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data().tensors
    losses = []
    for b in batches:
        loss = nn.functional.mse_loss(model(x[2 * b : 2 * b + 2]), y[2 * b : 2 * b + 2])
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, losses


def _same_weights(a: nn.Module, b: nn.Module):
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_cancel_step_skips_that_batch_only():
    model, result, events = _fit(state.CancelStep, at=2)  # the second batch of epoch 1
    assert result.status == "completed" and model.calls == 2 * BATCHES
    want, losses = _by_hand([0, 2, 3, 0, 1, 2, 3])
    _same_weights(model, want)
    # no metrics from the cancelled batch: epoch 1's loss is the mean over the three others
    epoch1 = next(e for e in events if isinstance(e, PhaseCompleted) and e.split == "train")
    assert epoch1.metrics["loss"] == pytest.approx(sum(losses[:3]) / 3, rel=1e-6)


def test_cancel_epoch_ends_the_epoch_and_the_next_one_runs():
    model, result, _ = _fit(state.CancelEpoch, at=2)
    assert result.status == "completed"
    assert model.calls == 2 + BATCHES  # epoch 1 ended at its second batch
    _same_weights(model, _by_hand([0, 0, 1, 2, 3])[0])


def test_cancel_fitting_ends_training_with_its_reason():
    model, result, _ = _fit(state.CancelFitting, at=3, epochs=5)
    assert model.calls == 3
    assert result.reason == "from the test" and result.status == "completed" and result.exit_code == 0
    _same_weights(model, _by_hand([0, 1])[0])
