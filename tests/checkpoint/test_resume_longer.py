"""A resume that changes the run's length (`--resume latest --set train.epochs=N`): a scheduler whose
length tuitrain filled in (OneCycleLR's total_steps, CosineAnnealingLR's T_max) is stretched to the
new length from where it stands, and the run says so once; a total_steps the config sets itself, too
short for the run, is a config error (exit 2) before any training, not OneCycleLR's ValueError mid-run."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain.core.checkpoint import Checkpointer, latest_checkpoint
from tuitrain.core.events import MetricsLogged
from tuitrain.core.learner import CoreLearner
from tuitrain.run.runner import prepare_run

STEPS = 7  # the tiny project: 100 items, batch 16: 7 steps an epoch


def _lrs(run_dir) -> dict[int, float]:
    lines = []
    for f in sorted(run_dir.glob("train/epoch-*/lr.log"), key=lambda p: int(p.parent.name.split("-")[1])):
        lines += [tuple(map(float, line.split())) for line in f.read_text().splitlines()]
    return {int(s): v for s, v in lines}  # a step logged twice (before and after a resume): the later one


def _notes(tiny, run_dir) -> list[str]:
    return [e["text"] for e in tiny.read_events(run_dir) if e["event"] == "OutputPrinted" and e["stream"] == "tuitrain"]


ONECYCLE = [
    "scheduler.name=OneCycleLR",
    "scheduler.max_lr=0.02",
    "scheduler.interval=step",
    'metrics.train=["loss", "lr"]',
]
SGD = ["optimizer.name=SGD", "optimizer.lr=1.0", "scheduler.interval=step", 'metrics.train=["loss", "lr"]']
COSINE = ["scheduler.name=CosineAnnealingLR", *SGD]
# a warm-up window, then cosine to the end: the last window's T_max is the run's length less 4
CHAIN = [
    'scheduler.chain=[{ name = "LinearLR", end = 4, start_factor = 0.25 }, { name = "CosineAnnealingLR", begin = 4 }]',
    *SGD,
]


@pytest.mark.parametrize(
    "sets,change",
    [
        (ONECYCLE, f"OneCycleLR's total_steps {2 * STEPS} -> {3 * STEPS}"),
        (COSINE, f"CosineAnnealingLR's T_max {2 * STEPS} -> {3 * STEPS}"),
        (CHAIN, f"CosineAnnealingLR's T_max {2 * STEPS - 4} -> {3 * STEPS - 4}"),
    ],
    ids=["onecycle", "cosine", "chain"],
)
def test_a_longer_resume_stretches_a_filled_in_schedule(tiny, forget_tinyproj, sets, change):
    first = prepare_run(tiny.config, [*sets, "train.epochs=2"])
    assert first.execute() == 0
    resumed = prepare_run(tiny.config, [*sets, "train.epochs=3"], resume="latest")
    assert resumed.run_dir == first.run_dir
    assert resumed.execute() == 0  # OneCycleLR: "Tried to step 15 times" before
    assert resumed.result.status == "completed" and resumed.result.reason == "epochs"
    # the schedule from step 14 on is the 3-epoch run's, as if it had been that long from the start
    whole = prepare_run(tiny.config, [*sets, "train.epochs=3"], run_dir=str(tiny.root / "whole"))
    assert whole.execute() == 0
    got, want = _lrs(first.run_dir), _lrs(whole.run_dir)
    assert sorted(got) == list(range(1, 3 * STEPS + 1))
    assert [got[s] for s in range(2 * STEPS + 1, 3 * STEPS + 1)] == pytest.approx(
        [want[s] for s in range(2 * STEPS + 1, 3 * STEPS + 1)], rel=1e-9, abs=1e-12
    )
    assert got[3 * STEPS] == pytest.approx(want[3 * STEPS], rel=1e-9, abs=1e-12)  # the new schedule's last value
    note = f"train.epochs changed 2 -> 3: {change} (the schedule is stretched from step {2 * STEPS})"
    assert _notes(tiny, first.run_dir).count(note) == 1, _notes(tiny, first.run_dir)
    assert note in (first.run_dir / "experiment.log").read_text()


def test_the_cli_resume_of_the_bug_report_completes(tiny):
    """`tuitrain run CONFIG --headless --resume latest --set train.epochs=N` after a shorter run."""
    sets = [a for s in ONECYCLE for a in ("--set", s)]
    r = tiny.cli("run", tiny.config, "--headless", *sets, "--set", "train.epochs=2")
    assert r.returncode == 0, r.stderr[-2000:]
    r = tiny.cli("run", tiny.config, "--headless", *sets, "--set", "train.epochs=3", "--resume", "latest")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr
    assert "OneCycleLR's total_steps 14 -> 21 (the schedule is stretched from step 14)" in r.stdout
    (run_dir,) = tiny.run_dirs()
    assert max(_lrs(run_dir)) == 3 * STEPS


def test_an_explicit_total_steps_too_short_for_the_resumed_run_exits_2_before_training(tiny):
    sets = [a for s in [*ONECYCLE, f"scheduler.total_steps={2 * STEPS}"] for a in ("--set", s)]
    r = tiny.cli("run", tiny.config, "--headless", *sets, "--set", "train.epochs=2")
    assert r.returncode == 0, r.stderr[-2000:]  # exactly long enough
    (run_dir,) = tiny.run_dirs()
    index = (run_dir / "checkpoint" / "index.json").read_text()
    config = (run_dir / "config.toml").read_text()
    r = tiny.cli("run", tiny.config, "--headless", *sets, "--set", "train.epochs=3", "--resume", "latest")
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert (run_dir / "config.toml").read_text() == config  # the rejected config leaves nothing behind
    assert "Traceback" not in r.stdout + r.stderr
    assert "scheduler.total_steps" in r.stderr and f"{3 * STEPS}" in r.stderr, r.stderr
    assert "leave it out" in r.stderr
    events = tiny.read_events(run_dir)
    assert [e["event"] for e in events].count("RunStarted") == 1  # nothing trained
    assert max(tiny.step_losses(events)) == 2 * STEPS
    assert (run_dir / "checkpoint" / "index.json").read_text() == index


def test_an_explicit_total_steps_too_short_for_a_new_run_exits_2(tiny, forget_tinyproj):
    run = prepare_run(tiny.config, [*ONECYCLE, "train.epochs=2", f"scheduler.total_steps={2 * STEPS - 1}"])
    assert run.execute() == 2
    err = str(run.config_error)
    assert "scheduler.total_steps" in err and f"{2 * STEPS - 1}" in err and f"{2 * STEPS}" in err, err
    assert not tiny.run_dirs()  # a config error leaves no run directory behind


def test_an_explicit_total_steps_raised_in_the_config_applies_on_resume(tiny, forget_tinyproj):
    """The advice of the error above works: the config's new total_steps, not the checkpoint's."""
    first = prepare_run(tiny.config, [*ONECYCLE, "train.epochs=2", f"scheduler.total_steps={2 * STEPS}"])
    assert first.execute() == 0
    resumed = prepare_run(
        tiny.config, [*ONECYCLE, "train.epochs=3", f"scheduler.total_steps={4 * STEPS}"], resume="latest"
    )
    assert resumed.execute() == 0
    assert any(f"OneCycleLR's total_steps {2 * STEPS} -> {4 * STEPS}" in n for n in _notes(tiny, first.run_dir))


# --- the Python API: the scheduler as the script builds it sets the length ---------------------


def _learner(folder, epochs: int, lrs: list):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=epochs * STEPS)

    def record(event, state):
        if isinstance(event, MetricsLogged) and event.split == "train" and event.scope == "step":
            lrs.append((event.step, event.metrics["lr"]))

    return CoreLearner(
        model,
        opt,
        loss_fn=nn.CrossEntropyLoss(),
        scheduler=sched,
        train_metrics=("loss", "lr"),
        valid_metrics=("loss",),
        callbacks=[record],
        epochs=epochs,
        device="cpu",
        log_every_n_steps=1,
        seed=7,
        batch_size=16,
        checkpoint=Checkpointer(folder),
    )


def _data():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(100, 4, generator=g), torch.randint(0, 3, (100,), generator=g)
    return TensorDataset(x, y)


def test_a_script_that_resumes_with_more_epochs_gets_its_new_schedule(tmp_path):
    ref: list = []
    assert _learner(tmp_path / "ref", 3, ref).fit(_data()).status == "completed"
    got: list = []
    assert _learner(tmp_path / "ckpt", 2, got).fit(_data()).status == "completed"
    got.clear()
    result = _learner(tmp_path / "ckpt", 3, got).fit(_data(), resume=latest_checkpoint(tmp_path / "ckpt"))
    assert result.status == "completed", result.error
    assert [s for s, _ in got] == list(range(2 * STEPS + 1, 3 * STEPS + 1))
    assert [v for _, v in got] == pytest.approx([v for s, v in ref if s > 2 * STEPS], rel=1e-9, abs=1e-12)


def test_the_first_step_after_the_stretch_already_has_the_new_schedules_lr_and_momentum(tmp_path):
    """Loading sets the optimizer's lr and betas to the longer schedule's at step 14, which step 15 uses."""
    assert _learner(tmp_path / "ckpt", 2, []).fit(_data()).status == "completed"
    learner = _learner(tmp_path / "ckpt", 3, [])
    learner.load_state_dict(torch.load(latest_checkpoint(tmp_path / "ckpt"), weights_only=True))
    assert learner.scheduler.total_steps == 3 * STEPS and learner.scheduler.last_epoch == 2 * STEPS
    opt = torch.optim.AdamW(nn.Linear(1, 1).parameters(), lr=1e-2)
    ref = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=3 * STEPS)
    for _ in range(2 * STEPS):
        opt.step()
        ref.step()
    (group,) = learner.optimizer.param_groups
    assert group["lr"] == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
    assert group["betas"][0] == pytest.approx(opt.param_groups[0]["betas"][0], rel=1e-12)
    assert learner.scheduler.get_last_lr() == [group["lr"]]
