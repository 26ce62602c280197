"""Custom phases with two models and two optimizers (demo/gan.py): training, metrics from the step's
named values, both optimizers and schedulers in the checkpoint, and bitwise-exact resume mid-epoch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tuitrain.core.checkpoint import Checkpointer, latest_checkpoint, load_checkpoint
from tuitrain.core.control import Interrupter
from tuitrain.core.events import MetricsLogged, PhaseCompleted, PhaseStarted
from tuitrain.core.learner import CoreLearner
from tuitrain.core.sections import Train
from tuitrain.core.phases import CustomTrainPhase

DEMO = Path(__file__).resolve().parents[2] / "demo"
sys.path.insert(0, str(DEMO))
import gan  # noqa: E402  (demo/gan.py)

EPOCHS = 3


class Recorder:
    def __init__(self, interrupter: Interrupter, stop=None) -> None:
        self.interrupter, self.stop = interrupter, stop
        self.steps: list = []  # (step, metrics) of every logged training step
        self.phases: dict = {}

    def __call__(self, event, state) -> None:
        match event:
            case MetricsLogged(split="train", scope="step", step=step, metrics=metrics):
                self.steps.append((step, dict(metrics)))
                if self.stop == ("step", step):
                    self.interrupter.request_stop("api", "test")
            case PhaseStarted(phase="valid", epoch=epoch):
                if self.stop == ("valid", epoch):
                    self.interrupter.request_stop("api", "test")
            case PhaseCompleted(split=split, epoch=epoch, metrics=metrics):
                self.phases[(split, epoch)] = dict(metrics)


def make_learner(folder, stop=None, epochs=EPOCHS) -> tuple[CoreLearner, Recorder]:
    torch.manual_seed(0)
    G, D = gan.Generator(latent=4, hidden=32, depth=2), gan.Discriminator(hidden=32, depth=2)
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.999))
    sched_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=3, gamma=0.9)  # per step: its state matters
    it = Interrupter()
    rec = Recorder(it, stop)
    learner = CoreLearner(
        {"generator": G, "discriminator": D},
        {"generator": opt_g, "discriminator": opt_d},
        scheduler={"generator": sched_g},
        train=Train(scheduler_interval={"generator": "step"}),
        train_phase=gan.GANPhase(),
        valid_phase=gan.GANValidPhase(),
        train_metrics=("loss", "g_loss", "d_loss", "lr"),
        valid_metrics=("loss", "mode_distance", "modes_covered"),
        callbacks=[rec],
        epochs=epochs,
        device="cpu",
        log_every_n_steps=1,
        seed=3,
        batch_size=64,
        interrupter=it,
        checkpoint=Checkpointer(folder, keep_last=2, keep_best=0),
    )
    return learner, rec


def data():
    return gan.datasets(n=576, valid_fraction=1 / 9)  # 512 train points: 8 batches of 64, 64 valid


def test_gan_phase_trains_and_logs_both_losses(tmp_path):
    learner, rec = make_learner(tmp_path / "checkpoint")
    before = {k: v.clone() for k, v in learner.models["generator"].state_dict().items()}
    result = learner.fit(*data())
    assert result.status == "completed", result.error
    assert [s for s, _ in rec.steps] == list(range(1, 8 * EPOCHS + 1))
    for _, metrics in rec.steps:
        assert {"loss", "g_loss", "d_loss", "lr"} <= set(metrics)
        assert metrics["loss"] == pytest.approx(metrics["g_loss"] + metrics["d_loss"])
    assert set(rec.phases[("valid", EPOCHS)]) == {"loss", "mode_distance", "modes_covered"}
    after = learner.models["generator"].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the generator was trained"
    assert learner.optimizers["generator"].param_groups[0]["lr"] < 1e-3, "its scheduler stepped"
    assert set(result.summary) >= {"train/g_loss", "train/d_loss", "valid/mode_distance"}


def test_checkpoint_holds_both_models_optimizers_and_scheduler(tmp_path):
    learner, _ = make_learner(tmp_path / "checkpoint", epochs=1)
    assert learner.fit(*data()).status == "completed"
    ckpt = load_checkpoint(latest_checkpoint(tmp_path / "checkpoint"))
    assert ckpt["optimizer_names"] == ["generator", "discriminator"]
    assert len(ckpt["optimizers"]) == 2 and all(o["state"] for o in ckpt["optimizers"])
    assert ckpt["optimizers"][1]["param_groups"][0]["lr"] == 2e-3
    assert ckpt["scheduler_names"] == ["generator"] and ckpt["schedulers"][0]["last_epoch"] == 8
    assert {k.split(".")[0] for k in ckpt["model"]} == {"generator", "discriminator"}


def run_with_stops(folder, stops):
    steps, phases, resume = [], {}, None
    for stop in list(stops) + [None]:
        learner, rec = make_learner(folder, stop)
        result = learner.fit(*data(), resume=resume)
        steps += rec.steps
        phases.update(rec.phases)
        assert result.status == ("completed" if stop is None else "interrupted"), result.error
        resume = latest_checkpoint(folder)
    return steps, phases, learner


@pytest.mark.parametrize("stops", [[("step", 5)], [("step", 11), ("valid", 2), ("step", 20)]])
def test_gan_resumes_exactly_mid_epoch(tmp_path, stops):
    ref_learner, ref = make_learner(tmp_path / "ref")
    assert ref_learner.fit(*data()).status == "completed"
    steps, phases, learner = run_with_stops(tmp_path / "checkpoint", stops)
    assert [s for s, _ in steps] == [s for s, _ in ref.steps], "a step was skipped or repeated"
    for (step, got), (_, want) in zip(steps, ref.steps):
        for name in ("g_loss", "d_loss", "lr"):
            assert got[name] == want[name], f"step {step}: {name} {got[name]!r} != {want[name]!r}"
    assert phases == ref.phases
    ref_weights = ref_learner.raw_model.state_dict()
    for k, v in learner.raw_model.state_dict().items():
        assert torch.equal(v, ref_weights[k]), k


def test_a_checkpoint_without_optimizer_names_loads_by_position(tmp_path):
    learner, _ = make_learner(tmp_path / "checkpoint", epochs=1)
    learner.fit(*data())
    ckpt = load_checkpoint(latest_checkpoint(tmp_path / "checkpoint"))
    del ckpt["optimizer_names"], ckpt["scheduler_names"]
    fresh, _ = make_learner(tmp_path / "other", epochs=2)
    fresh.load_state_dict(ckpt)
    assert fresh.optimizers["discriminator"].state_dict()["state"][0]["step"] == 8


def test_a_checkpoint_missing_an_optimizer_says_which(tmp_path):
    learner, _ = make_learner(tmp_path / "checkpoint", epochs=1)
    ckpt = learner.state_dict()
    ckpt["optimizer_names"] = ["generator", "critic"]
    with pytest.raises(ValueError, match="no optimizer 'discriminator'.*generator, critic"):
        learner.load_state_dict(ckpt)


def test_step_optimizer_is_refused_in_validation(tmp_path):
    class StepsInValid(gan.GANValidPhase):
        def step(self, learner, batch):
            learner.step_optimizer("generator")

    learner, _ = make_learner(tmp_path / "checkpoint", epochs=1)
    learner.valid_phase = StepsInValid()
    result = learner.fit(*data())
    assert result.status == "failed" and "not a training phase" in result.error


def test_a_metric_the_step_does_not_return_is_named(tmp_path):
    learner, _ = make_learner(tmp_path / "checkpoint", epochs=1)
    learner.metric_sets["train"].__init__(["loss", "g_los"], step_values=True)
    result = learner.fit(*data())
    assert result.status == "failed"
    assert "'g_los'" in result.error and "g_loss" in result.error


def test_several_models_need_a_phase_of_their_own():
    G, D = gan.Generator(), gan.Discriminator()
    opts = {"generator": torch.optim.Adam(G.parameters()), "discriminator": torch.optim.Adam(D.parameters())}
    with pytest.raises(ValueError, match="CustomTrainPhase"):
        CoreLearner({"generator": G, "discriminator": D}, opts, device="cpu")


def test_one_model_keeps_learner_model_and_optimizer():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    learner = CoreLearner(model, opt, device="cpu")
    assert learner.model is model and learner.models == {"model": model}
    assert learner.optimizer is opt and learner.optimizers == {"model": opt}


def test_custom_phase_with_one_optimizer_needs_no_name(tmp_path):
    class Plain(CustomTrainPhase):
        def step(self, learner, batch):
            x, y = batch
            loss = torch.nn.functional.mse_loss(learner.model(x), y)
            learner.backward(loss)
            learner.step_optimizer()
            return loss.detach()

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 2)
    ds = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    learner = CoreLearner(
        model,
        opt,
        train_phase=Plain(),
        train_metrics=("loss",),
        valid_metrics=(),
        epochs=20,
        batch_size=16,
        device="cpu",
    )
    result = learner.fit(ds)
    assert result.status == "completed", result.error
    assert result.summary["train/loss"]["last"] < 0.01


def test_in_step_points_reach_step_callbacks_only():
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from tuitrain import CustomTrainPhase, Learner
    from tuitrain.core.events import StepPoint

    class Fired(CustomTrainPhase):
        def step(self, learner, batch):
            x, y = batch
            learner.zero_grad()
            loss = nn.functional.mse_loss(learner.model(x), y)
            learner.fire("loss")
            learner.backward(loss)
            learner.fire("backward_completed")
            learner.step_optimizer()
            learner.fire("optimizer_stepped", "model")
            return {"loss": loss.detach()}

    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    seen, files = [], []
    learner = Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        device="cpu",
        batch_size=4,
        train_phase=Fired(),
        callbacks=[lambda e, s: seen.append(e)],
    )
    learner.bus.subscribe(lambda e, s: files.append(e), steps=False)  # as the file sinks are
    assert learner.fit(TensorDataset(torch.randn(8, 2), torch.randn(8, 1))).exit_code == 0
    points = [(e.point, e.step, e.detail) for e in seen if isinstance(e, StepPoint)]
    assert points == [
        ("loss", 1, ""),
        ("backward_completed", 1, ""),
        ("optimizer_stepped", 1, "model"),
        ("loss", 2, ""),
        ("backward_completed", 2, ""),
        ("optimizer_stepped", 2, "model"),
    ]
    assert not any(isinstance(e, StepPoint) for e in files)
