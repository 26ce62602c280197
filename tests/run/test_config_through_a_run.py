"""Config keys followed through a whole run built from the TOML (prepare_run, in this process):
`[train] validate_every`, `[checkpoint] init_from` and `[log] tensorboard`."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tuitrain.run.runner import prepare_run


def _events(run_dir):
    from tests.conftest import read_events

    return read_events(run_dir)


def test_validate_every_2_validates_every_second_epoch_only(tiny, forget_tinyproj):
    run = prepare_run(tiny.config, ["train.epochs=5", "train.validate_every=2"])
    assert run.execute() == 0
    events = _events(run.run_dir)
    valid = [e["epoch"] for e in events if e["event"] == "PhaseCompleted" and e["split"] == "valid"]
    assert valid == [2, 4]  # README: "validate every N epochs"
    train = [e["epoch"] for e in events if e["event"] == "PhaseCompleted" and e["split"] == "train"]
    assert train == [1, 2, 3, 4, 5]


def test_init_from_starts_the_run_from_those_weights(tiny, forget_tinyproj):
    import tinyproj

    torch.manual_seed(123)  # weights no run of the tiny project starts from by itself
    start = tinyproj.Net(hidden=16, dropout=0.3).state_dict()
    torch.save(start, tiny.root / "init.pt")
    # lr 0: the weights never move, so what the run ends with is what it started from
    init = (tiny.root / "init.pt").as_posix()
    run = prepare_run(tiny.config, ["train.epochs=1", "optimizer.lr=0.0", f"checkpoint.init_from={init}"])
    assert run.execute() == 0
    final = torch.load(run.run_dir / "model.pt", weights_only=True)
    assert final.keys() == start.keys() and all(torch.equal(final[k], start[k]) for k in start)
    # and the validation loss is that of those weights, computed here on the valid data
    net = tinyproj.Net(hidden=16, dropout=0.3)
    net.load_state_dict(start)
    net.eval()
    x, y = tinyproj.datasets(n=100, seed=0)[1].tensors
    with torch.no_grad():
        want = nn.functional.cross_entropy(net(x), y).item()
    (got,) = [
        e["metrics"]["loss"] for e in _events(run.run_dir) if e["event"] == "PhaseCompleted" and e["split"] == "valid"
    ]
    assert got == pytest.approx(want, rel=1e-5)


def test_log_tensorboard_writes_the_run_s_scalars(tiny, forget_tinyproj):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = prepare_run(tiny.config, ["train.epochs=1", "log.tensorboard=true"])
    assert run.execute() == 0
    acc = EventAccumulator(str(run.run_dir / "tensorboard"))
    acc.Reload()
    from tests.conftest import step_losses

    want = step_losses(_events(run.run_dir))
    assert len(want) == 7
    got = {s.step: s.value for s in acc.Scalars("train/loss")}
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k], rel=1e-6) for k in want)  # float32 in the event file
