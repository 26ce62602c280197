"""Exact resume, in process: a run stopped at any step and resumed from its latest checkpoint by a fresh
Learner gives bitwise the same per-step losses, epoch metrics and final weights as a run that was never
stopped (shuffle, dropout, gradient accumulation with a partial last group, per-step schedulers,
a stop during validation, repeated stops, data-loader workers).

The tests that take `exact_device` run on TUITRAIN_TEST_DEVICE (the CPU by default; on CUDA with
deterministic algorithms on: tests/conftest.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain.core.checkpoint import Checkpointer, latest_checkpoint, load_checkpoint
from tuitrain.core.control import Interrupter
from tuitrain.core.early_stopping import EarlyStopping
from tuitrain.core.events import MetricsLogged, PhaseCompleted, PhaseStarted
from tuitrain.core.learner import CoreLearner
from tuitrain.core.sections import Train

N_TRAIN, N_VALID, BATCH = 100, 40, 16  # 7 train batches per epoch (the last has 4 items), 3 valid
BATCHES = -(-N_TRAIN // BATCH)
SEED = 7


@dataclass(frozen=True)
class Case:
    epochs: int = 3
    accum: int = 1
    scheduler: str = "onecycle"  # "onecycle", "steplr" (both per step) or "" (none)
    workers: int = 0
    shuffle: bool = True
    interval: str = "step"  # when the scheduler steps: "step" or "epoch"
    early_patience: int = 0  # > 0: EarlyStopping on valid/loss that never counts as improved

    @property
    def steps_per_epoch(self) -> int:
        return -(-BATCHES // self.accum)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N_TRAIN + N_VALID, 4, generator=g)
    y = torch.randint(0, 3, (N_TRAIN + N_VALID,), generator=g)
    return TensorDataset(x[:N_TRAIN], y[:N_TRAIN]), TensorDataset(x[N_TRAIN:], y[N_TRAIN:])


@dataclass
class Recorder:
    """Collects what a run reports; `stop` says when to ask the loop to stop."""

    interrupter: Interrupter
    stop: tuple | None = None  # ("step", k) or ("valid", epoch)
    losses: list = field(default_factory=list)  # [(step, loss)] in emission order
    phases: dict = field(default_factory=dict)  # (split, epoch) -> metrics of the completed phase

    def __call__(self, event, state) -> None:
        match event:
            case MetricsLogged(split="train", scope="step", step=step, metrics=metrics):
                self.losses.append((step, metrics["loss"]))
                if self.stop == ("step", step):
                    self.interrupter.request_stop("api", "test")
            case PhaseStarted(phase="valid", epoch=epoch):
                if self.stop == ("valid", epoch):
                    self.interrupter.request_stop("api", "test")
            case PhaseCompleted(split=split, epoch=epoch, metrics=metrics):
                self.phases[(split, epoch)] = dict(metrics)


def make_learner(case: Case, folder, stop=None, device="cpu") -> tuple[CoreLearner, Recorder]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if case.scheduler == "onecycle":
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=case.total_steps)
    elif case.scheduler == "steplr":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.7)
    else:
        sched = None
    it = Interrupter()
    rec = Recorder(it, stop)
    early = (
        EarlyStopping("valid/loss", "min", patience=case.early_patience, min_delta=100.0)
        if case.early_patience
        else None
    )
    learner = CoreLearner(
        model,
        opt,
        loss_fn=nn.CrossEntropyLoss(),
        scheduler=sched,
        train=Train(scheduler_interval=case.interval),
        early_stopping=early,
        train_metrics=("loss", "accuracy"),
        valid_metrics=("loss", "accuracy"),
        callbacks=[rec],
        epochs=case.epochs,
        grad_accumulation=case.accum,
        device=device,
        log_every_n_steps=1,
        seed=SEED,
        batch_size=BATCH,
        shuffle=case.shuffle,
        num_workers=case.workers,
        interrupter=it,
        checkpoint=Checkpointer(folder, keep_last=2, keep_best=1),
    )
    return learner, rec


#: the uninterrupted runs already trained in this module, by (case, total_steps, device): several tests (and the
#: parameters of one) compare their stops with the same run, which trains the same every time (the first test
#: checks that two fresh runs agree); the tests only read what it returns
_REFERENCES: dict[tuple, tuple] = {}


def reference(case: Case, tmp_path, total_steps: int | None = None, device="cpu", fresh: bool = False):
    """The uninterrupted run of `case` (its Recorder, its final weights); `fresh`: trained now, not reused."""
    key = (case, total_steps, device)
    if not fresh and key in _REFERENCES:
        return _REFERENCES[key]
    learner, rec = make_learner(case, tmp_path / "ref-checkpoint", device=device)
    result = learner.fit(*datasets())
    assert result.status == "completed" and result.exit_code == 0, result.error
    rec.reason = result.reason
    steps = [s for s, _ in rec.losses]
    total = case.total_steps if total_steps is None else total_steps
    assert steps == list(range(1, total + 1)), "log_every_n_steps=1 logs every step once"
    _REFERENCES[key] = rec, {k: v.clone() for k, v in learner.raw_model.state_dict().items()}
    return _REFERENCES[key]


def interrupted(case: Case, tmp_path, stops: list, reason: str = "epochs", device="cpu"):
    """Run with a stop at each of `stops` in turn, resuming each time from the latest checkpoint."""
    folder = tmp_path / "checkpoint"
    losses, phases = [], {}
    resume = None
    for stop in list(stops) + [None]:
        learner, rec = make_learner(case, folder, stop, device)
        result = learner.fit(*datasets(), resume=resume)
        losses += rec.losses
        phases.update(rec.phases)
        if stop is None:
            assert result.status == "completed", result.error
            assert result.reason == reason
        else:
            assert (result.status, result.exit_code) == ("interrupted", 130), (stop, result.error)
        resume = latest_checkpoint(folder)
        assert resume is not None
    return losses, phases, learner.raw_model.state_dict()


def assert_same_run(case: Case, tmp_path, stops: list, total_steps: int | None = None, device="cpu") -> None:
    ref, ref_weights = reference(case, tmp_path, total_steps, device)
    losses, phases, weights = interrupted(case, tmp_path, stops, ref.reason, device)
    where = f"stops={stops}"
    assert [s for s, _ in losses] == [s for s, _ in ref.losses], f"{where}: a step was skipped or repeated"
    for (step, got), (_, want) in zip(losses, ref.losses):
        assert got == want, f"{where}: step {step} loss {got!r} != uninterrupted {want!r}"
    assert phases == ref.phases, where
    for k, v in ref_weights.items():
        assert torch.equal(weights[k], v), f"{where}: final weight {k} differs"


def random_steps(case: Case, count: int, salt: str) -> list:
    rng = random.Random(f"{salt}-{case}")
    return [("step", k) for k in sorted(rng.sample(range(1, case.total_steps), count))]


# --- the cases --------------------------------------------------------------------------------


def test_uninterrupted_runs_are_reproducible(tmp_path, exact_device):
    """Two fresh runs with the same seed agree; without this nothing below means anything."""
    case = Case(epochs=2)
    a, wa = reference(case, tmp_path / "a", device=exact_device, fresh=True)
    b, wb = reference(case, tmp_path / "b", device=exact_device, fresh=True)
    assert a.losses == b.losses
    assert len(set(v for _, v in a.losses)) > 1


def test_the_stop_really_happens_at_the_requested_step(tmp_path):
    case = Case(epochs=2)
    learner, rec = make_learner(case, tmp_path / "checkpoint", ("step", 5))
    result = learner.fit(*datasets())
    assert result.status == "interrupted" and result.exit_code == 130
    assert [s for s, _ in rec.losses] == [1, 2, 3, 4, 5]
    data = load_checkpoint(latest_checkpoint(tmp_path / "checkpoint"))
    assert (data["epoch"], data["step"], data["batch"]) == (1, 5, 5)


def test_resume_random_step_shuffle_dropout_onecycle(tmp_path, exact_device):
    case = Case(scheduler="onecycle")
    assert_same_run(case, tmp_path, random_steps(case, 1, "plain"), device=exact_device)


@pytest.mark.parametrize("k", [1, BATCHES, BATCHES + 1])
def test_resume_at_epoch_edges(tmp_path, k, exact_device):
    """The first step, the last step of epoch 1 (before validation) and the first of epoch 2."""
    assert_same_run(Case(epochs=2), tmp_path, [("step", k)], device=exact_device)


def test_resume_grad_accumulation_3_partial_group_steplr(tmp_path, exact_device):
    case = Case(accum=3, scheduler="steplr")  # 7 batches: groups of 3, 3 and 1
    assert case.steps_per_epoch == 3
    for k in (2, 3, 4):  # mid-epoch, right after the partial group, first step of epoch 2
        assert_same_run(case, tmp_path / f"k{k}", [("step", k)], device=exact_device)


def test_resume_after_stop_during_validation(tmp_path, exact_device):
    assert_same_run(Case(), tmp_path, [("valid", 2)], device=exact_device)


def test_resume_after_stop_during_first_validation(tmp_path):
    assert_same_run(Case(epochs=2, accum=3), tmp_path, [("valid", 1)])


def test_repeated_stop_and_resume(tmp_path):
    case = Case(epochs=3, scheduler="onecycle")
    stops = random_steps(case, 3, "repeat")
    assert_same_run(case, tmp_path, stops)


def test_repeated_stops_mixing_steps_and_validation(tmp_path, exact_device):
    assert_same_run(Case(epochs=3, accum=3), tmp_path, [("step", 2), ("valid", 1), ("step", 5)], device=exact_device)


def test_resume_with_two_dataloader_workers(tmp_path):
    case = Case(epochs=2, workers=2)
    assert_same_run(case, tmp_path, random_steps(case, 1, "workers"))


@pytest.mark.parametrize("stop", [("step", 3), ("step", BATCHES), ("valid", 1), ("step", BATCHES + 2)])
def test_resume_with_a_per_epoch_scheduler(tmp_path, stop):
    assert_same_run(Case(epochs=3, scheduler="steplr", interval="epoch"), tmp_path, [stop])


@pytest.mark.parametrize("stop", [("step", BATCHES + 2), ("valid", 2)])
def test_resume_keeps_the_early_stopping_state(tmp_path, stop):
    """Patience 1 and nothing counts as improved: the run ends after epoch 2, resumed or not."""
    case = Case(epochs=4, early_patience=1)
    assert_same_run(case, tmp_path, [stop], total_steps=2 * case.steps_per_epoch)


def test_resume_without_shuffle_or_scheduler(tmp_path):
    assert_same_run(Case(epochs=2, shuffle=False, scheduler=""), tmp_path, [("step", 9)])


# --- what a checkpoint holds -----------------------------------------------------------------


def test_checkpoint_is_weights_only_and_complete(tmp_path, test_device):
    case = Case(epochs=2, scheduler="onecycle")
    learner, _ = make_learner(case, tmp_path / "checkpoint", ("step", 4), test_device)
    learner.fit(*datasets())
    path = latest_checkpoint(tmp_path / "checkpoint")
    data = torch.load(path, weights_only=True)
    for key in ("model", "optimizers", "schedulers", "rng", "epoch", "step", "batch"):
        assert key in data, key
    assert (data["epoch"], data["step"], data["batch"]) == (1, 4, 4)
    assert set(data["model"]) == set(learner.raw_model.state_dict())
    for k, v in learner.raw_model.state_dict().items():
        assert torch.equal(data["model"][k], v.cpu())  # a checkpoint holds CPU tensors, whatever the device
    assert len(data["optimizers"]) == 1 and data["optimizers"][0]["state"]
    assert len(data["schedulers"]) == 1 and data["schedulers"][0]["last_epoch"] == 4
    assert isinstance(data["rng"]["torch"], torch.Tensor)
    assert data["rng"]["torch"].dtype == torch.uint8
    if test_device != "cpu":  # dropout on CUDA draws from the CUDA generators: their states too
        assert len(data["rng"]["cuda"]) == torch.cuda.device_count()


def test_epoch_checkpoints_load_weights_only(tmp_path):
    case = Case(epochs=3)
    learner, _ = make_learner(case, tmp_path / "checkpoint")
    learner.fit(*datasets())
    files = sorted((tmp_path / "checkpoint").glob("*.pt"))
    assert files
    for p in files:
        data = torch.load(p, weights_only=True)
        assert data["format"] == "tuitrain-checkpoint"
    last = torch.load(latest_checkpoint(tmp_path / "checkpoint"), weights_only=True)
    assert last["step"] == case.total_steps and last["epoch"] == case.epochs


def test_the_comparison_catches_a_resume_that_forgets_the_rng(tmp_path, monkeypatch, exact_device):
    """Negative control: without the RNG restored, dropout draws differ and the losses do too."""
    import tuitrain.core.learner_checkpoint as learner_module  # where the Learner restores its RNG

    case = Case(epochs=2)
    ref, _ = reference(case, tmp_path, device=exact_device)
    monkeypatch.setattr(learner_module, "set_rng_state", lambda state: None)
    losses, _, _ = interrupted(case, tmp_path, [("step", 3)], device=exact_device)
    assert [s for s, _ in losses] == [s for s, _ in ref.losses]
    assert losses[:3] == ref.losses[:3]
    assert losses[3:] != ref.losses[3:]


def test_resume_before_an_epoch_scheduler_step_does_not_warn(tmp_path):
    import warnings

    case = Case(epochs=2, scheduler="steplr", interval="epoch")
    folder = tmp_path / "checkpoint"
    learner, _ = make_learner(case, folder, ("valid", 1))
    assert learner.fit(*datasets()).status == "interrupted"
    learner, _ = make_learner(case, folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert learner.fit(*datasets(), resume=latest_checkpoint(folder)).status == "completed"
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
