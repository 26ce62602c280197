"""A stop asked of a Monitor loop also raises `checkpoint_requested` (SPEC: "so a loop that checks it
before `stop_requested` saves a checkpoint at the stop, as the q dialog says"), once; the integrations,
which save at a stop themselves, turn that off."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import read_events, wait_for
from tuitrain import Monitor
from tuitrain.core.control import FileControl


def index(run_dir) -> list[dict]:
    return json.loads((run_dir / "checkpoint" / "index.json").read_text())


def test_a_stop_request_raises_checkpoint_requested(tmp_path):
    with Monitor(run_dir=tmp_path / "r", dashboard=False) as mon:
        mon.log(1, loss=1.0)
        assert not mon.checkpoint_requested
        FileControl(mon.run_dir).request_stop("cli")  # `tuitrain stop RUN_DIR`
        wait_for(lambda: mon.interrupter.stop_requested, what="the stop")
        assert mon.checkpoint_requested
        mon.save_checkpoint({"step": torch.tensor(1)})
        assert not mon.checkpoint_requested  # once: the checkpoint is saved
        assert mon.stop_requested
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "interrupted"
    started = next(e for e in read_events(tmp_path / "r") if e["event"] == "RunStarted")
    assert started["loop"] == "monitor"  # what the dashboard's q dialog words a stop by


@pytest.mark.parametrize("checkpoint_first", [True, False], ids=["checkpoint-then-stop", "stop-then-checkpoint"])
@pytest.mark.parametrize("stop_at", ["before-the-checks", "between-the-checks"])
def test_a_loop_that_checks_both_saves_one_checkpoint_at_the_stop(tmp_path, checkpoint_first, stop_at):
    """Wherever in the pass the stop comes (the dashboard's q y, from another thread), and whichever
    of the two the loop checks first, it saves one checkpoint, at the step it leaves at."""
    run_dir = tmp_path / "r"
    saved, left = [], None
    with Monitor(run_dir=run_dir, dashboard=False) as mon:
        for step in range(1, 50):
            mon.log(step, loss=1.0 / step)
            if step == 10 and stop_at == "before-the-checks":
                mon.interrupter.request_stop("dashboard", "quit")
            checks = ["checkpoint", "stop"] if checkpoint_first else ["stop", "checkpoint"]
            for i, check in enumerate(checks):
                if i == 1 and step == 10 and stop_at == "between-the-checks":
                    mon.interrupter.request_stop("dashboard", "quit")
                if check == "checkpoint" and mon.checkpoint_requested:
                    mon.save_checkpoint({"step": torch.tensor(step)}, step=step)
                    saved.append(step)
                if check == "stop" and mon.stop_requested:
                    left = step
                    break
            if left is not None:
                break
    assert len(saved) == 1 and left in (10, 11) and saved[0] in (left - 1, left), (saved, left)
    assert [r["step"] for r in index(run_dir)] == saved
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"


def test_a_loop_that_never_checks_for_checkpoints_leaves_one_pass_later(tmp_path):
    with Monitor(run_dir=tmp_path / "r", dashboard=False) as mon:
        mon.interrupter.request_stop("signal")
        assert [mon.stop_requested for _ in range(3)] == [False, True, True]
        assert mon.checkpoint_requested  # still raised: nothing was saved


def test_without_checkpoint_on_stop_a_stop_is_only_a_stop(tmp_path):
    """What the Lightning and Hugging Face callbacks ask for: they save at a stop themselves."""
    mon = Monitor(run_dir=tmp_path / "r", dashboard=False)
    mon.checkpoint_on_stop = False
    with mon:
        mon.interrupter.request_stop("cli")
        assert mon.stop_requested and not mon.checkpoint_requested
        assert not mon.take_checkpoint_request()


def test_a_run_directory_that_cannot_be_written_stops_without_a_checkpoint(tmp_path):
    with Monitor(run_dir=tmp_path / "r", dashboard=False) as mon:
        mon.interrupter.request_stop("dashboard")
        mon.interrupter.fail("disk full")
        assert mon.stop_requested and not mon.checkpoint_requested


def test_a_checkpoint_asked_for_and_then_a_stop_saves_twice(tmp_path):
    """`c`, saved; later `q` `y`: the stop raises its own checkpoint."""
    run_dir = tmp_path / "r"
    with Monitor(run_dir=run_dir, dashboard=False) as mon:
        for step in range(1, 50):
            mon.log(step, loss=1.0)
            if step == 3:
                mon.interrupter.request_checkpoint("dashboard")
            if step == 7:
                mon.interrupter.request_stop("dashboard", "quit")
            if mon.checkpoint_requested:
                mon.save_checkpoint({"step": torch.tensor(step)}, step=step)
            if mon.stop_requested:
                break
    assert [r["step"] for r in index(run_dir)] == [3, 7]
