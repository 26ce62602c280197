"""Validation by steps: `validate_every_n_steps` validates inside the training epoch (and at the end) on
at most `limit_valid_batches` batches; early stopping and "best" checkpoints follow those validations,
and a run stopped and resumed between them trains bitwise the same."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tuitrain
from tuitrain.core.sections import Train
from tuitrain.core.checkpoint import read_index
from tuitrain.core.early_stopping import EarlyStopping
from tuitrain.core.events import MetricsLogged, PhaseStarted


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _fit(run_dir, lr=0.1, stop_at=0, resume=None, **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
    learner = tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=lr),
        loss_fn=nn.CrossEntropyLoss(),
        batch_size=8,
        epochs=3,
        run_dir=run_dir,
        log_every_n_steps=1,
        seed=2,
        train=Train(validate_every_n_steps=5, limit_valid_batches=2),
        **kw,
    )
    seen = {"train": {}, "valid": {}, "valid_batches": []}

    def record(event, state):
        if isinstance(event, MetricsLogged) and event.split == "train" and event.scope == "step":
            seen["train"][event.step] = event.metrics["loss"]
            if event.step == stop_at:
                learner.interrupter.request_stop("test")
        if isinstance(event, MetricsLogged) and event.split == "valid":
            seen["valid"][event.step] = event.metrics["loss"]
        if isinstance(event, PhaseStarted) and event.phase == "valid":
            seen["valid_batches"].append(event.batches)

    learner.bus.subscribe(record, steps=False, batched=False)
    result = learner.fit(_data(48, 0), _data(40, 1), resume=resume, dashboard=False)  # 6 steps an epoch
    return learner, result, seen


def test_validation_every_n_steps_on_a_few_batches_and_at_the_end(tmp_path):
    _, result, seen = _fit(tmp_path / "run")
    assert result.status == "completed"
    assert sorted(seen["valid"]) == [5, 10, 15, 18]  # every 5 steps, and at the end
    assert seen["valid_batches"] == [2, 2, 2, 2]  # 5 batches there, 2 used
    assert sorted(seen["train"]) == list(range(1, 19))


def test_a_run_stopped_between_validations_resumes_bitwise(tmp_path):
    _, _, expected = _fit(tmp_path / "ref")
    _, stopped, first = _fit(tmp_path / "run", stop_at=7)
    assert stopped.status == "interrupted"
    ckpt = tmp_path / "run" / "checkpoint" / read_index(tmp_path / "run" / "checkpoint")[-1].file
    _, result, second = _fit(tmp_path / "run", resume=ckpt)
    assert result.status == "completed"
    train = {**first["train"], **second["train"]}
    assert train == expected["train"]
    valid = {**first["valid"], **second["valid"]}
    assert valid == expected["valid"]


def test_early_stopping_and_best_checkpoints_follow_the_step_validations(tmp_path):
    # lr = 0: the weights never change, so valid/loss never improves after the first validation
    learner, result, seen = _fit(
        tmp_path / "run", lr=0.0, early_stopping=EarlyStopping("valid/loss", "min", patience=1)
    )
    assert result.status == "completed" and result.reason == "early_stopping"
    assert sorted(seen["valid"]) == [5, 10]  # stopped at the second validation, mid-epoch 2
    # a step checkpoint taken where a validation ran carries its valid metrics: "best" follows them
    from tuitrain.core.checkpoint import Checkpointer

    run_dir = tmp_path / "best"
    ck = Checkpointer(
        run_dir / "checkpoint", keep_last=10, keep_best=1, monitor="valid/loss", every_n_steps=5, every_n_epochs=0
    )
    _, result, seen = _fit(run_dir, checkpoint=ck)
    rows = {e.step: e for e in read_index(run_dir / "checkpoint")}
    assert {5, 10, 15} <= set(rows)
    for step in (5, 10, 15):
        assert rows[step].metrics["valid/loss"] == seen["valid"][step]
    (best,) = [e for e in rows.values() if e.best]
    assert best.metrics["valid/loss"] == min(seen["valid"][s] for s in rows if s in seen["valid"])


@pytest.mark.parametrize("key", ["validate_every_n_steps", "limit_valid_batches"])
@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_counts_are_refused(key, value):
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=f"train.{key} must be a whole number of 0 or more"):
        tuitrain.Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), train=Train(**{key: value}))
