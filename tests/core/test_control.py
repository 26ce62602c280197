"""The control channel: Interrupter flags, command files across processes, and a Learner that
pauses, checkpoints on request and stops at step boundaries without changing its results."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tests.conftest import wait_for
from tuitrain.core.checkpoint import Checkpointer, read_index
from tuitrain.core.control import COMMANDS, ControlWatcher, FileControl, Interrupter, control_dir
from tuitrain.core.events import CheckpointSaved, ControlReceived, MetricsLogged, RunPaused, RunResumed
from tuitrain.core.learner import CoreLearner


# --- Interrupter ------------------------------------------------------------------------------


def test_interrupter_starts_idle():
    it = Interrupter()
    assert not (it.pending or it.stop_requested or it.paused or it.checkpoint_requested)


def test_stop_sets_pending_and_keeps_the_first_source():
    it = Interrupter()
    it.request_stop("signal", "SIGTERM")
    it.request_stop("dashboard")
    assert it.pending and it.stop_requested and it.stop_source == "signal"
    assert [c for c, _, _ in it.take_log()] == ["stop", "stop"]
    it.settle()
    assert it.pending  # a stop stays pending until the loop acts on it


def test_checkpoint_request_is_taken_once():
    it = Interrupter()
    it.request_checkpoint("file")
    assert it.pending
    assert it.take_checkpoint() is True
    assert it.take_checkpoint() is False
    it.take_log()
    it.settle()
    assert not it.pending


def test_pause_resume_and_toggle():
    it = Interrupter()
    it.toggle_pause("dashboard")
    assert it.paused and it.pending
    assert it.wait_while_paused(0.01) is False
    it.toggle_pause("dashboard")
    assert not it.paused
    assert it.wait_while_paused(0.01) is True
    assert [c for c, _, _ in it.take_log()] == ["pause", "resume"]
    it.settle()
    assert not it.pending


def test_stop_wakes_a_paused_loop():
    it = Interrupter()
    it.pause()
    woke = []
    t = threading.Thread(target=lambda: woke.append(it.wait_while_paused(5.0)))
    t.start()
    time.sleep(0.05)
    it.request_stop()
    t.join(2)
    assert woke == [True]


# --- FileControl and ControlWatcher ------------------------------------------------------------


def test_file_control_writes_whole_command_files(tmp_path):
    p = FileControl(tmp_path).send("checkpoint", source="cli")
    assert p.parent == control_dir(tmp_path) and p.suffix == ".cmd"
    assert p.read_text() == "cli"
    assert not [q for q in p.parent.iterdir() if q.suffix == ".tmp"]
    with pytest.raises(ValueError):
        FileControl(tmp_path).send("rm -rf /")


@pytest.mark.parametrize("command", COMMANDS)
def test_watcher_applies_each_command_and_deletes_its_file(tmp_path, command):
    it = Interrupter()
    watcher = ControlWatcher(tmp_path, it)
    watcher.dir.mkdir()
    if command == "resume":
        it.pause()
        it.take_log()
    FileControl(tmp_path).send(command, source="cli")
    assert watcher.poll_once() == 1
    assert list(watcher.dir.iterdir()) == []
    log = it.take_log()
    assert log and log[-1][1] == "cli"
    expected = {
        "stop": lambda: it.stop_requested,
        "checkpoint": lambda: it.checkpoint_requested,
        "pause": lambda: it.paused,
        "resume": lambda: not it.paused,
        "toggle_pause": lambda: it.paused,
    }[command]
    assert expected()


def test_watcher_drops_stale_commands_at_start_and_polls_on_its_thread(tmp_path):
    FileControl(tmp_path).send("stop")  # meant for an earlier, dead process
    it = Interrupter()
    watcher = ControlWatcher(tmp_path, it, interval=0.02)
    polls = []  # commands taken by each poll
    poll_once = watcher.poll_once
    watcher.poll_once = lambda: polls.append(poll_once()) or polls[-1]
    watcher.start()
    try:
        wait_for(lambda: len(polls) >= 2, timeout=10, what="two polls of the control folder")
        assert polls[:2] == [0, 0] and not it.stop_requested
        FileControl(tmp_path).send("checkpoint")
        wait_for(lambda: it.checkpoint_requested, timeout=10, what="the checkpoint request")
    finally:
        watcher.close()


# --- a Learner steered while it trains ----------------------------------------------------------


def learner_with(callbacks, folder, interrupter, epochs=2):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g))
    learner = CoreLearner(
        model,
        opt,
        loss_fn=nn.CrossEntropyLoss(),
        callbacks=callbacks,
        epochs=epochs,
        device="cpu",
        log_every_n_steps=1,
        seed=3,
        batch_size=16,
        interrupter=interrupter,
        checkpoint=Checkpointer(folder, keep_last=10, every_n_epochs=0),
    )
    return learner, data


def losses_of(events):
    return [
        (e.step, e.metrics["loss"])
        for e in events
        if isinstance(e, MetricsLogged) and e.split == "train" and e.scope == "step"
    ]


def test_pause_checkpoint_and_resume_leave_the_results_unchanged(tmp_path):
    ref_events = []
    learner, data = learner_with([lambda e, s: ref_events.append(e)], tmp_path / "ref", Interrupter())
    assert learner.fit(data).status == "completed"

    it = Interrupter()
    events = []
    resume_sent = threading.Event()
    after_pause = []  # for each step logged after the pause: whether the resume had been sent by then

    def resume_once_paused():
        wait_for(lambda: any(isinstance(e, RunPaused) for e in events), timeout=60, what="RunPaused")
        resume_sent.set()
        it.resume("test")

    def steer(e, s):
        events.append(e)
        if isinstance(e, MetricsLogged) and e.scope == "step" and e.step > 2:
            after_pause.append(resume_sent.is_set())
        if isinstance(e, MetricsLogged) and e.scope == "step" and e.step == 2:
            it.pause("test")
            it.request_checkpoint("test")
            threading.Thread(target=resume_once_paused, daemon=True).start()

    learner, data = learner_with([steer], tmp_path / "run", it)
    result = learner.fit(data)
    assert result.status == "completed"
    assert after_pause and all(after_pause)  # no step while paused
    kinds = [type(e) for e in events]
    assert RunPaused in kinds and RunResumed in kinds
    paused = next(e for e in events if isinstance(e, RunPaused))
    assert paused.step == 2
    saved = [e for e in events if isinstance(e, CheckpointSaved) and e.reason == "request"]
    assert len(saved) == 1 and saved[0].step == 2
    received = [(e.command, e.source) for e in events if isinstance(e, ControlReceived)]
    assert ("pause", "test") in received and ("checkpoint", "test") in received and ("resume", "test") in received
    assert losses_of(events) == losses_of(ref_events)
    assert [e.reason for e in read_index(tmp_path / "run")] == ["request", "end"]


def test_stop_while_paused_ends_the_run(tmp_path):
    it = Interrupter()

    def stop_once_paused():
        wait_for(lambda: it.paused, timeout=60, what="the pause")
        it.request_stop("test")

    def steer(e, s):
        if isinstance(e, MetricsLogged) and e.scope == "step" and e.step == 1:
            it.pause("test")
            threading.Thread(target=stop_once_paused, daemon=True).start()

    learner, data = learner_with([steer], tmp_path / "run", it, epochs=50)
    done = []
    t = threading.Thread(target=lambda: done.append(learner.fit(data)))
    t.start()
    t.join(20)
    assert done, "a stop must end a paused run"
    assert (done[0].status, done[0].exit_code) == ("interrupted", 130)
    assert [e.reason for e in read_index(tmp_path / "run")] == ["stop"]
    assert read_index(tmp_path / "run")[0].step == 1


def test_stop_from_another_thread_stops_at_a_step_boundary(tmp_path):
    it = Interrupter()
    seen = []

    def slow(e, s):
        if isinstance(e, MetricsLogged) and e.scope == "step":
            seen.append(e.step)
            time.sleep(0.01)

    learner, data = learner_with([slow], tmp_path / "run", it, epochs=200)

    def stop_mid_run():
        wait_for(lambda: len(seen) >= 5, timeout=60, what="five steps")
        it.request_stop("signal", "SIGTERM")

    threading.Thread(target=stop_mid_run, daemon=True).start()
    result = learner.fit(data)
    assert result.status == "interrupted" and result.reason == "stopped"
    (entry,) = read_index(tmp_path / "run")
    assert entry.reason == "stop" and entry.step == seen[-1]
    assert seen == list(range(1, seen[-1] + 1))
