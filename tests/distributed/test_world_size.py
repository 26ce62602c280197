"""A checkpoint taken mid-epoch by another number of processes resumes at the next epoch, with a warning:
the position in the data order is per rank. In one process, with the checkpoint's world_size edited."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain.core.checkpoint import Checkpointer, latest_checkpoint, load_checkpoint
from tuitrain.core.control import Interrupter
from tuitrain.core.events import EpochStarted, MetricsLogged, OutputPrinted, RunStarted
from tuitrain.core.learner import CoreLearner


def _learner(folder, **kw) -> tuple[CoreLearner, list]:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    seen: list = []
    callbacks = [lambda e, s: seen.append(e), *kw.pop("callbacks", [])]
    lr = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        device="cpu",
        batch_size=16,
        seed=3,
        checkpoint=Checkpointer(folder, every_n_epochs=0),
        callbacks=callbacks,
        capture_output=True,
        **kw,
    )
    return lr, seen


def _stopped_at_step_3(folder) -> dict:
    it = Interrupter()

    def stop(e, s):
        if isinstance(e, MetricsLogged) and e.step == 3:
            it.request_stop("test")

    first, _ = _learner(folder, epochs=3, interrupter=it, log_every_n_steps=1, callbacks=[stop])
    assert first.fit(_data()).exit_code == 130
    data = load_checkpoint(latest_checkpoint(folder))
    assert (data["epoch"], data["batch"], data["stage"]) == (1, 3, "train")
    return data


def _data():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(100, 4, generator=g), torch.randint(0, 3, (100,), generator=g))


def test_other_world_size_resumes_at_the_next_epoch(tmp_path):
    data = _stopped_at_step_3(tmp_path / "ck")

    data["world_size"] = 2  # as if 2 ranks wrote it
    second, seen = _learner(tmp_path / "ck2", epochs=3)
    result = second.fit(_data(), resume=data)
    assert result.exit_code == 0
    started = next(e for e in seen if isinstance(e, RunStarted))
    assert (started.start_epoch, started.start_step) == (2, 3)
    assert [e.epoch for e in seen if isinstance(e, EpochStarted)] == [2, 3]
    assert any("written by 2 process(es)" in e.text for e in seen if isinstance(e, OutputPrinted))
    assert result.summary and second.state.step == 3 + 2 * 7


def test_same_world_size_resumes_mid_epoch(tmp_path):
    data = _stopped_at_step_3(tmp_path / "ck")
    second, seen = _learner(tmp_path / "ck2", epochs=1)
    second.fit(_data(), resume=data)
    assert next(e for e in seen if isinstance(e, RunStarted)).start_epoch == 1
    assert not any("process(es)" in e.text for e in seen if isinstance(e, OutputPrinted))
    assert second.state.step == 7
