"""The loop's two training bodies say the same: `Loop.plain_epoch` (the common case, without the calls it
does not need) and `Loop.train_epoch` (every case), run over every setting the loop has, each run's
events compared field by field (clocks left out) and its weights bitwise.

Where the plain body applies (the default step, no accumulation, no clipping), a run that may take it
(`Loop.plain_allowed`, the default) is compared with one that may not; where it does not apply
(accumulation, clipping) the test checks that the general body alone ran."""

from __future__ import annotations

import json

import pytest
import torch

from tests.health.healthproj import Net, datasets
from tuitrain.core import loop
from tuitrain.core.learner import CoreLearner
from tuitrain.core.sections import Checkpointing, Data, Log, Train

#: fields that are clocks, or follow them
CLOCKS = {"time", "duration", "write", "stall", "wait", "elapsed", "bytes", "pid", "run_dir", "env"}
#: written off the loop's thread (the checkpoint writer, the media writer): compared in their own order
OFF_THREAD = {"CheckpointSaved", "CheckpointDeleted", "MediaLogged", "HistogramLogged"}
SPIKE = 30  # the batch of epoch 1 scaled x300 (skipping, rollback)


def text_sample(model, step):
    return f"step {step}: {float(next(model.parameters()).sum()):.6f}"


#: name: (Learner keywords, datasets() keywords, the plain body applies)
SETTINGS = {
    "plain": ({}, {}, True),
    "accumulation": ({"train": Train(epochs=2, grad_accumulation=3)}, {}, False),
    "clipping": ({"train": Train(epochs=2, clip_grad_norm=0.05)}, {}, False),
    "skipping": ({"watch": {"loss_spike": "skip", "spike_window": 16}}, {"scale_batch": SPIKE}, True),
    "nonfinite skipping": ({"watch": {"nonfinite": "skip"}}, {"nan_item": SPIKE * 16 + 3}, True),
    "rollback": ({"watch": {"loss_spike": "rollback", "spike_window": 16}}, {"scale_batch": SPIKE}, True),
    "step validation": ({"train": Train(epochs=2, validate_every_n_steps=25)}, {}, True),
    "step checkpoints, max_steps": ({"train": Train(epochs=3, max_steps=70)}, {}, True),
    "media": (
        {
            "log": Log(
                every_n_steps=5,
                samples={"target": text_sample, "every_n_steps": 30},
                histograms=["weights", "grads"],
                histograms_every_n_steps=20,
            )
        },
        {},
        True,
    ),
}


def scrub(value):
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in CLOCKS and not k.endswith("throughput")}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def fit(tmp_path, name: str, learner_kw: dict, data_kw: dict, plain: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(loop.Loop, "plain_allowed", plain)
    taken = []
    original = loop.Loop.plain_epoch
    monkeypatch.setattr(loop.Loop, "plain_epoch", lambda *a: taken.append(1) or original(*a))
    events = []

    run_dir = tmp_path / f"{name}-{'plain' if plain else 'general'}"

    def record(event, state):
        # as JSON text: a NaN (a non-finite loss's alert) equals itself
        events.append(
            (type(event).__name__, json.dumps(scrub(event.to_dict()), sort_keys=True).replace(str(run_dir), "RUN"))
        )

    record.step_events = False  # a callback that takes every step runs the general body

    torch.manual_seed(0)
    model = Net()
    kw = {"train": Train(epochs=2), "checkpoint": Checkpointing(every_n_steps=30, keep_last=3), **learner_kw}
    learner = CoreLearner(
        model,
        torch.optim.AdamW(model.parameters(), lr=0.01),
        loss_fn=torch.nn.MSELoss(),
        data=Data(batch_size=16, shuffle=False),
        callbacks=[record],
        device="cpu",
        seed=5,
        run_dir=run_dir,
        **kw,
    )
    train, valid = datasets(n=512, **data_kw)
    result = learner.fit(train, valid)
    assert result.exit_code == 0, result.error
    in_order = [e for e in events if e[0] not in OFF_THREAD and e[0] != "DevicesSampled"]
    off_thread = [e for e in events if e[0] in OFF_THREAD]
    params = [p.detach().clone() for p in model.parameters()]
    return in_order, off_thread, params, len(taken)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_both_bodies_say_the_same(tmp_path, monkeypatch, name):
    learner_kw, data_kw, applies = SETTINGS[name]
    events, off, params, plain_epochs = fit(tmp_path, name, learner_kw, data_kw, True, monkeypatch)
    general, general_off, general_params, none = fit(tmp_path, name, learner_kw, data_kw, False, monkeypatch)
    assert none == 0  # plain_allowed False: the general body only
    assert (plain_epochs > 0) == applies
    assert len(events) == len(general)
    for i, (a, b) in enumerate(zip(events, general)):
        assert a == b, f"event {i}"
    assert sorted(off) == sorted(general_off)  # the same events from the threads, in the order they finished
    assert all(torch.equal(a, b) for a, b in zip(params, general_params))
    kinds = {k for k, _ in events} | {k for k, _ in off}
    assert {"RunStarted", "MetricsLogged", "CheckpointSaved", "RunFinished"} <= kinds
    if name.endswith("skipping"):
        assert "StepSkipped" in kinds
    if name == "rollback":
        assert "RolledBack" in kinds
    if name == "media":
        assert {"MediaLogged", "HistogramLogged"} <= kinds
