"""Every `Data` field reaches the DataLoader, by `Learner.fit` and by a config's run alike (issue 51:
`fit` dropped `drop_last` and `pin_memory`, which the config path honoured)."""

import dataclasses
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain.core import data as data_module
from tuitrain.core.learner import CoreLearner
from tuitrain.core.sections import Data

# how each field shows on the built training loader, and a value unlike its default. A new Data field
# fails test_every_field_has_a_probe until it is plumbed through build_loaders and given a probe here.
PROBES = {
    "batch_size": (7, lambda rl: rl.loader.batch_size),
    "num_workers": (1, lambda rl: rl.loader.num_workers),
    "shuffle": (False, lambda rl: rl.sampler.shuffle),
    "drop_last": (True, lambda rl: rl.loader.drop_last),
    "pin_memory": (True, lambda rl: rl.loader.pin_memory),
}


def dataset(n=1000):
    return TensorDataset(torch.randn(n, 3), torch.randn(n, 1))


def learner_with(data, **train):
    model = nn.Linear(3, 1)
    return CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.MSELoss(),
        epochs=1,
        device="cpu",
        data=data,
        **train,
    )


def test_every_field_has_a_probe():
    assert {f.name for f in dataclasses.fields(Data)} == set(PROBES)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Data)])
def test_each_field_reaches_the_loader_through_fit(name):
    value, probe = PROBES[name]
    default = getattr(Data(), name)
    assert value != default
    seen = []
    learner = learner_with(Data(**{name: value}), max_steps=1)
    real = learner.strategy.loaders

    def capture(lr, train, valid):
        seen.append(train)
        return real(lr, train, valid)

    learner.strategy.loaders = capture
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator
        result = learner.fit(dataset(64))
    assert result.exit_code == 0, result.error
    assert probe(seen[0]) == value


def test_the_config_path_uses_the_same_builder():
    # read, not imported: the core's tests use the core alone (tests/test_layers.py)
    source = (Path(data_module.__file__).parents[1] / "run" / "build.py").read_text()
    assert "build_loaders(" in source and "build_loader(" not in source


def test_drop_last_takes_whole_batches_only():
    learner = learner_with(Data(batch_size=64, drop_last=True))
    result = learner.fit(dataset(1000))
    assert result.exit_code == 0, result.error
    assert learner.state.step == 15  # 1000 // 64, not 16


def test_validation_keeps_its_last_batch_and_order():
    train, valid = data_module.build_loaders(dataset(100), dataset(100), Data(batch_size=64, drop_last=True))
    assert train.batches_per_epoch() == 1 and valid.batches_per_epoch() == 2
    assert valid.sampler.shuffle is False
