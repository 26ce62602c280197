"""max_time: a wall-clock budget for training; when spent, the run stops at the next step with a
checkpoint, as completed; a resumed run counts the time its earlier sessions used."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tuitrain
from tuitrain.core.sections import Train
from tuitrain.core.checkpoint import load_checkpoint, read_index
from tuitrain.core.control import parse_duration


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        time.sleep(0.01)
        return self.lin(x)


def _learner(run_dir, max_time):
    torch.manual_seed(0)
    model = Slow()
    return tuitrain.Learner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
        batch_size=8,
        run_dir=run_dir,
        train=Train(epochs=10_000, max_time=max_time),
    )


def _data():
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x[:, 0] > 0).long())


def test_a_spent_budget_stops_the_run_as_completed_with_a_final_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    result = _learner(run_dir, "1s").fit(_data(), dashboard=False)
    took = time.monotonic() - t0
    assert result.status == "completed" and result.exit_code == 0 and result.reason == "max_time"
    assert took < 60  # 10 000 epochs would take hours
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["reason"] == "max_time"
    last = read_index(run_dir / "checkpoint")[-1]
    # the budget can run out right at an epoch's end, whose checkpoint is then the final one
    assert last.step == info["step"] > 0 and last.reason in ("end", "epoch")
    used = load_checkpoint(run_dir / "checkpoint" / last.file)["time_used"]
    if last.reason == "end":  # written once the budget was spent
        assert used >= 1.0
    else:  # the epoch's checkpoint of the step the run stopped at, written just before the timer fired
        # (the same state is not written twice): it records the time used when it was taken, a step
        # and a checkpoint's write before the stop at most
        assert used > 0.5
    assert "max_time (1s) spent" in (run_dir / "experiment.log").read_text()


def test_a_resumed_run_counts_the_time_already_used(tmp_path):
    run_dir = tmp_path / "run"
    first = _learner(run_dir, 1.0).fit(_data(), dashboard=False)
    assert first.reason == "max_time"
    ckpt = run_dir / "checkpoint" / read_index(run_dir / "checkpoint")[-1].file
    step = load_checkpoint(ckpt)["step"]
    # the same budget is already spent: the resumed run stops at its first step boundary
    again = _learner(run_dir, 1.0).fit(_data(), resume=ckpt, dashboard=False)
    assert again.reason == "max_time" and again.status == "completed"
    assert json.loads((run_dir / "run.json").read_text())["step"] <= step + 1


@pytest.mark.parametrize(
    "text, seconds", [("2h30m", 9000), ("45m", 2700), ("90s", 90), ("1.5h", 5400), ("", 0), ("1d", 86400)]
)
def test_durations_read_as_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "2h30", "-5m", "m"])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)
