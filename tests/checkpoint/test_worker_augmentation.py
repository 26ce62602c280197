"""Randomness in a Dataset's __getitem__ (augmentation) in loader workers: each item is fetched under a
seed of its own (tuitrain.core.data.SeededItems), so a run resumed mid-epoch, after a stop or kill -9,
replays every step's loss bitwise, and the batches no longer depend on the number of workers."""

from __future__ import annotations

import os
import signal
import textwrap

import pytest
import torch
from torch import nn

from tuitrain.core import data as data_module
from tuitrain.core.checkpoint import Checkpointer, latest_checkpoint
from tuitrain.core.control import Interrupter
from tuitrain.core.data import build_loader
from tuitrain.core.events import MetricsLogged
from tuitrain.core.learner import CoreLearner

AUG_MODULE = '''
import torch
from torch.utils.data import Dataset


class Noisy(Dataset):
    """Inputs with noise drawn from torch's global RNG in __getitem__, as augmentation does."""

    def __init__(self, n=96, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.5 * torch.randn(4), self.y[i]


def datasets(n=96):
    return Noisy(n, 0), Noisy(32, 1)
'''


class Noisy(torch.utils.data.Dataset):
    def __init__(self, n: int = 96) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.5 * torch.randn(4), self.y[i]


def test_items_replay_mid_epoch_and_do_not_depend_on_the_worker_count():
    def epoch(workers: int, skip: int = 0) -> list:
        loader = build_loader(Noisy(40), batch_size=4, shuffle=True, num_workers=workers, seed=3)
        return [b[0] for b in loader.epoch_iter(2, skip)]

    whole, resumed, one_worker = epoch(2), epoch(2, skip=3), epoch(1)
    assert len(whole) == 10 and len(resumed) == 7
    assert all(torch.equal(a, b) for a, b in zip(whole[3:], resumed))
    assert all(torch.equal(a, b) for a, b in zip(whole, one_worker))
    assert not torch.equal(whole[0], epoch(2)[1])  # noise there is, and it differs from batch to batch


def _fit(folder, stop_at: int = 0, resume=None) -> dict[int, float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    it = Interrupter()
    losses: dict[int, float] = {}

    def record(event, state):
        if isinstance(event, MetricsLogged) and event.split == "train" and event.scope == "step":
            losses[event.step] = event.metrics["loss"]
            if event.step == stop_at:
                it.request_stop("api", "test")

    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=2,
        device="cpu",
        log_every_n_steps=1,
        seed=5,
        batch_size=8,
        num_workers=2,
        callbacks=[record],
        interrupter=it,
        checkpoint=Checkpointer(folder, keep_last=2),
    )
    result = learner.fit(Noisy(), None, resume=resume)
    assert result.status == ("interrupted" if stop_at else "completed"), result.error
    return losses


def _stopped_and_resumed(tmp_path, k: int) -> tuple[dict, dict]:
    ref = _fit(tmp_path / "ref")
    first = _fit(tmp_path / "ckpt", stop_at=k)
    second = _fit(tmp_path / "ckpt", resume=latest_checkpoint(tmp_path / "ckpt"))
    return ref, {**first, **second}


def test_a_run_whose_workers_augment_resumes_bitwise(tmp_path):
    ref, got = _stopped_and_resumed(tmp_path, 5)  # mid-epoch: 12 steps an epoch
    assert sorted(got) == sorted(ref) == list(range(1, 25))
    assert got == ref


def test_without_seeded_items_the_resumed_run_differs(tmp_path, monkeypatch):
    """The test above can fail: with items fetched on the workers' running RNGs, it does."""
    monkeypatch.setattr(data_module, "_seeded", lambda dataset, sampler, workers, seed: dataset)
    ref, got = _stopped_and_resumed(tmp_path, 5)
    assert sorted(got) == sorted(ref)
    assert [s for s in ref if got[s] != ref[s]], "the resumed steps should differ without per-item seeds"


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_kill_9_during_an_augmenting_epoch_then_resume_latest_is_bitwise(tiny):
    (tiny.root / "augproj.py").write_text(textwrap.dedent(AUG_MODULE))
    text = tiny.config_text().replace('target = "tinyproj:datasets"', 'target = "augproj:datasets"')
    text = text.replace("num_workers = 0", "num_workers = 2").replace("n = 100\nseed = 0\n", "n = 96\n")
    text = text.replace("every_n_epochs = 1", "every_n_epochs = 1\nevery_n_steps = 4")
    ref_cfg = tiny.write_config("ref.toml", text.replace('name = "tiny"', 'name = "ref"'))
    slow_cfg = tiny.write_config("aug.toml", text.replace("dropout = 0.3", "dropout = 0.3\nsleep = 0.15"))
    r = tiny.cli("run", ref_cfg, "--headless")
    assert r.returncode == 0, r.stderr
    ref = tiny.step_losses(tiny.read_events(next((tiny.runs / "ref").iterdir())))
    proc = tiny.cli_bg("run", slow_cfg, "--headless")
    try:
        tiny.wait_for(
            lambda: tiny.run_dirs() and tiny.last_train_step(tiny.run_dirs()[0]) >= 10, timeout=120, what="step 10"
        )
        proc.send_signal(signal.SIGKILL)  # without a word (its loader workers see their parent go)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    r = tiny.cli("run", slow_cfg, "--headless", "--resume", "latest", "--set", "model.sleep=0.0")
    assert r.returncode == 0, r.stderr
    got = tiny.step_losses(tiny.read_events(tiny.run_dirs()[0], torn_ok=True))
    assert sorted(ref) == list(range(1, 19)), sorted(ref)  # 96 items, batch 16: 6 steps an epoch, 3 epochs
    assert sorted(got) == sorted(ref), sorted(got)
    assert got == ref
