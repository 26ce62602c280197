"""Checkpoints asked for (the `c` key, `tuitrain checkpoint`, a stop's) are the user's: keep_last and
keep_best never delete them nor count them, `keep_requested` alone decides (0: all), index.json marks
them, and `--resume latest` still takes the newest sound checkpoint, asked for or not.

Real training of a tiny model, real files, requests through the control folder as the commands send
them (`FileControl(run_dir).send(command, source="cli")`, read by the run's ControlWatcher)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tuitrain
from tests.conftest import wait_for
from tuitrain.config import Config
from tuitrain.core.checkpoint import Checkpointer, read_index
from tuitrain.core.control import FileControl
from tuitrain.core.events import CheckpointSaved, MetricsLogged
from tuitrain.run.runner import UsageError, resolve_resume

STEPS_PER_EPOCH = 4  # 64 items, batches of 16


def fit(run_dir, *, epochs=6, at: dict[int, str] | None = None, keep_requested=0, resume=None):
    """A run of `epochs` epochs (a checkpoint each, keep_last=2) whose callback sends `at[step]`
    ("checkpoint" or "stop") as `tuitrain checkpoint/stop RUN_DIR` would, at that step, and waits until
    the run has the request: it is taken at that step's boundary. (result, CheckpointSaved events)."""
    at = dict(at or {})
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g))
    saved = []

    def steer(event, state):
        if isinstance(event, CheckpointSaved):
            saved.append(event)
        if isinstance(event, MetricsLogged) and event.scope == "step" and event.step in at:
            command = at.pop(event.step)
            FileControl(run_dir).send(command, source="cli")
            flag = "checkpoint_requested" if command == "checkpoint" else "stop_requested"
            wait_for(lambda: getattr(learner.interrupter, flag), timeout=30, what=f"the {command} request")

    learner = tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=epochs,
        device="cpu",
        batch_size=16,
        log_every_n_steps=1,
        seed=1,
        run_dir=run_dir,
        callbacks=[steer],
        checkpoint=Checkpointer(
            run_dir / "checkpoint", keep_last=2, keep_best=1, every_n_epochs=1, keep_requested=keep_requested
        ),
    )
    return learner.fit(data, resume=resume, dashboard=False), saved


def index_rows(run_dir) -> list[dict]:
    return json.loads((run_dir / "checkpoint" / "index.json").read_text())


def own(run_dir) -> list[int]:
    """The steps of the run's own checkpoints listed."""
    return [r["step"] for r in index_rows(run_dir) if not r.get("requested")]


def requested(run_dir) -> list[tuple[int, str, str]]:
    """(step, reason, requested_by) of the checkpoints asked for, each present on disk."""
    rows = [r for r in index_rows(run_dir) if r.get("requested")]
    for r in rows:
        assert (run_dir / "checkpoint" / r["file"]).is_file(), r
    return [(r["step"], r["reason"], r["requested_by"]) for r in rows]


def test_a_checkpoint_asked_for_mid_run_outlives_keep_last_and_pushes_nothing_out(tmp_path):
    run_dir = tmp_path / "run"
    result, saved = fit(run_dir, at={3: "checkpoint"})
    assert result.status == "completed"
    assert requested(run_dir) == [(3, "request", "command")]
    # keep_last = 2 counts only the run's own: the last two epochs' checkpoints, as without the request
    assert own(run_dir) == [5 * STEPS_PER_EPOCH, 6 * STEPS_PER_EPOCH]
    asked = [e for e in saved if e.reason == "request"]
    assert [(e.step, e.requested) for e in asked] == [(3, "command")]
    assert all(e.requested == "" for e in saved if e.reason != "request")


def test_a_stops_checkpoint_is_asked_for_and_survives_the_resumed_runs_epochs(tmp_path):
    run_dir = tmp_path / "run"
    stop_at = 3 * STEPS_PER_EPOCH + 2  # mid-epoch 4
    result, _ = fit(run_dir, at={3: "checkpoint", stop_at: "stop"})
    assert (result.status, result.reason) == ("interrupted", "stopped")
    assert requested(run_dir) == [(3, "request", "command"), (stop_at, "stop", "stop")]
    assert own(run_dir) == [2 * STEPS_PER_EPOCH, 3 * STEPS_PER_EPOCH]  # the stop pushed none out

    # resumed from the stop's checkpoint, the run's new epoch checkpoints never delete either one
    result, _ = fit(run_dir, epochs=7, resume=run_dir / "checkpoint" / index_rows(run_dir)[-1]["file"])
    assert result.status == "completed"
    assert requested(run_dir) == [(3, "request", "command"), (stop_at, "stop", "stop")]
    assert own(run_dir) == [6 * STEPS_PER_EPOCH, 7 * STEPS_PER_EPOCH]


def test_keep_requested_keeps_only_the_newest_n_asked_for(tmp_path):
    run_dir = tmp_path / "run"
    result, saved = fit(run_dir, at={3: "checkpoint", 6: "checkpoint", 10: "checkpoint"}, keep_requested=1)
    assert result.status == "completed"
    assert requested(run_dir) == [(10, "request", "command")]
    assert own(run_dir) == [5 * STEPS_PER_EPOCH, 6 * STEPS_PER_EPOCH]
    assert not (run_dir / "checkpoint" / "epoch-0001-step-00000003.pt").exists()
    assert not (run_dir / "checkpoint" / "epoch-0002-step-00000006.pt").exists()


def damage(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_resume_latest_takes_the_newest_sound_checkpoint_asked_for_or_not(tmp_path):
    cfg = Config()
    cfg.experiment.dir, cfg.experiment.name = str(tmp_path / "runs"), "exp"
    run_dir = tmp_path / "runs" / "exp" / "2026-01-01_00-00-00"
    stop_at = 4 * STEPS_PER_EPOCH + 1
    fit(run_dir, at={3: "checkpoint", stop_at: "stop"})
    folder = run_dir / "checkpoint"
    stop_file = folder / f"epoch-0005-step-{stop_at:08d}.pt"
    assert resolve_resume("latest", cfg) == (run_dir, stop_file)  # the newest, asked for

    damage(stop_file)  # passed over: the newest sound one is the run's own
    assert resolve_resume("latest", cfg) == (run_dir, folder / "epoch-0004-step-00000016.pt")

    for e in read_index(folder):
        if e.reason == "epoch":
            damage(folder / e.file)
    # only the checkpoint asked for mid-run is sound: it is still there, and taken
    assert resolve_resume("latest", cfg) == (run_dir, folder / "epoch-0001-step-00000003.pt")
    damage(folder / "epoch-0001-step-00000003.pt")
    with pytest.raises(UsageError):
        resolve_resume("latest", cfg)
