"""A run's life between start and finish (core/lifecycle.py), as the Learner and Monitor both drive it:
control said, a checkpoint asked for handed over, a pause waited out, the summary, the end and its
exit code, and RunFailed made in one place whatever failed."""

import math
import threading

from tuitrain.core.control import Interrupter
from tuitrain.core.events import ControlReceived, RunFailed, RunFinished, RunPaused, RunResumed
from tuitrain.core.lifecycle import Lifecycle, Summary, outcome, run_failed
from tuitrain.core.state import NonFiniteLoss, RunDirUnwritable


class Bus:
    def __init__(self):
        self.events = []

    def emit(self, event):
        self.events.append(event)


def test_a_boundary_says_the_requests_saves_the_checkpoint_asked_for_and_waits_out_a_pause():
    bus, it = Bus(), Interrupter()
    saved, paused_for, chores = [], [], []
    life = Lifecycle(bus, it, save=saved.append, chores=lambda: chores.append(1))
    life.after_pause.append(paused_for.append)
    it.request_checkpoint("dashboard")
    it.pause("dashboard")
    threading.Timer(0.3, it.resume, args=("command",)).start()
    life.boundary(epoch=2, step=40)
    assert saved == ["dashboard"]
    kinds = [type(e) for e in bus.events]
    assert kinds.index(RunPaused) < kinds.index(RunResumed)
    commands = [(e.command, e.source) for e in bus.events if isinstance(e, ControlReceived)]
    assert ("checkpoint", "dashboard") in commands and ("pause", "dashboard") in commands
    assert ("resume", "command") in commands  # said while paused, as it came
    resumed = next(e for e in bus.events if isinstance(e, RunResumed))
    assert (resumed.epoch, resumed.step) == (2, 40) and resumed.paused_for >= 0.25
    assert paused_for == [resumed.paused_for] and chores  # the metrics' clocks left the pause out


def test_a_stop_ends_a_pause_and_is_the_callers_to_act_on():
    bus, it = Bus(), Interrupter()
    life = Lifecycle(bus, it)  # no `save`: a loop of one's own takes checkpoint requests itself
    it.request_checkpoint("command")
    it.pause()
    threading.Timer(0.2, it.request_stop, args=("dashboard",)).start()
    life.boundary(epoch=1, step=3)
    assert it.stop_requested and it.checkpoint_requested  # left for the loop
    assert isinstance(bus.events[-1], (ControlReceived, RunResumed))


def test_the_end_status_and_exit_code_come_from_the_reason():
    assert outcome("epochs") == ("completed", 0) and outcome("max_time") == ("completed", 0)
    for reason in ("stopped", "preempted", "killed"):
        assert outcome(reason) == ("interrupted", 130)
    bus = Bus()
    life = Lifecycle(bus, Interrupter())
    life.summary.add("train/loss", 2.0)
    end = life.finished("stopped", epoch=3, step=30)
    assert isinstance(end, RunFinished) and bus.events == [end]
    assert (end.status, end.exit_code, end.reason) == ("interrupted", 130, "stopped")
    assert end.summary == {"train/loss": {"min": 2.0, "max": 2.0, "last": 2.0}} and end.duration >= 0


def test_run_failed_says_each_cause_in_one_line():
    try:
        raise ValueError("bad shape")
    except ValueError as e:
        mine = run_failed(e, epoch=2, step=7)
    assert (mine.error, mine.cause, mine.exit_code) == ("ValueError: bad shape", "", 1)
    assert "raise ValueError" in mine.traceback
    disk = run_failed(RunDirUnwritable("runs/x: No space left on device", "the writer's traceback"))
    assert (disk.error, disk.traceback, disk.cause) == (
        "runs/x: No space left on device",
        "the writer's traceback",
        "write_failed",
    )
    oom = run_failed(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert oom.cause == "out_of_memory"
    nan = run_failed(NonFiniteLoss(float("nan"), epoch=1, step=5))
    assert nan.error == "loss is nan at step 5 (epoch 1); training stopped"  # no exception name before it
    config = run_failed("config.toml: train.epochs: must be >= 0", exit_code=2, cause="config_error")
    assert isinstance(config, RunFailed) and (config.exit_code, config.traceback) == (2, "")


def test_a_failed_run_reports_its_summary_and_last_checkpoint():
    bus = Bus()
    life = Lifecycle(bus, Interrupter())
    life.summary.add("valid/acc", 0.5)
    end = life.failed(KeyError("x"), epoch=1, step=2, checkpoint="checkpoint/a.pt")
    assert bus.events == [end] and end.checkpoint == "checkpoint/a.pt"
    assert end.summary == {"valid/acc": {"min": 0.5, "max": 0.5, "last": 0.5}}


def test_the_summary_keeps_min_max_last_and_their_epochs_and_leaves_nan_out():
    history = {
        "train/loss": [[1, 3.0], [2, 1.0], [3, float("nan")]],
        "valid/acc": [[1, 0.5], [2, 0.75], [3, 0.75]],
        "train/none": [[1, float("nan")]],
    }
    table = Summary.of(history).table()
    assert table["valid/acc"] == {"min": 0.5, "min_epoch": 1, "max": 0.75, "max_epoch": 2, "last": 0.75}
    loss = table["train/loss"]
    assert (loss["min"], loss["min_epoch"], loss["max"], loss["max_epoch"]) == (1.0, 2, 3.0, 1)
    assert math.isnan(loss["last"])  # the last value is the last one, whatever it is
    assert "train/none" not in table
    assert list(table["valid/acc"]) == ["min", "min_epoch", "max", "max_epoch", "last"]  # events.jsonl's order
