"""What the dashboard says about a stop holds: the q dialog words what `y` does to the loop that runs
(tuitrain's own saves a checkpoint; a Monitor loop saves one only if it checks `checkpoint_requested`;
Lightning and the Hugging Face Trainer stop after the step), and a watched run that has ended is not
called gone while its process lives."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tuitrain.core.events import RunStarted
from tuitrain.dashboard.app import DashboardApp
from tuitrain.sources.run_files import FileSource
from tuitrain.dashboard.screens.confirm_screen import ConfirmScreen

from .fixtures import T0, recorded_run, write_jsonl
from .test_app import RecordingController, make_app, shown, sync, until


def run_of(loop: str, run_dir: str = "runs/x/1"):
    events = recorded_run(epochs=1, total_epochs=3, end="running")
    return [dataclasses.replace(e, loop=loop, run_dir=run_dir) if isinstance(e, RunStarted) else e for e in events]


def squeezed(text: str) -> str:
    return "".join(text.split())


SAYS = {  # loop -> what the y line must say, and what it must not promise
    "": ("checkpoint saved", None),
    "monitor": ("if it checks checkpoint_requested", "checkpoint saved"),
    "lightning": ("trainer.should_stop", "checkpoint saved"),
    "transformers": ("should_training_stop", "checkpoint saved"),
}


@pytest.mark.parametrize("loop", list(SAYS), ids=["learner", "monitor", "lightning", "transformers"])
@sync
async def test_the_q_dialog_says_what_a_stop_does_to_this_kind_of_run(loop):
    says, never = SAYS[loop]
    app = make_app(run_of(loop), controller=RecordingController())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state.step == 20)
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.pause()
        line = str(app.screen.query_one("#confirm-keys").render()).splitlines()[0]
        assert says in line and (never is None or never not in line), line
        # the whole line on the screen at 80x24: wrapped in the box, nothing cut off
        box = app.screen.query_one("#confirm-box").content_region
        rows = [s.crop(box.x, box.right).text for s in app.screen._compositor.render_strips()[box.y : box.bottom]]
        assert squeezed(line) in squeezed("".join(rows)), rows


@sync
async def test_a_learner_without_a_run_directory_promises_no_checkpoint():
    app = make_app(run_of("", run_dir=""), controller=RecordingController())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.state.step == 20)
        await pilot.press("q")
        line = str(app.screen.query_one("#confirm-keys").render()).splitlines()[0]
        assert line == "y: stop gracefully and leave"


@sync
async def test_y_on_a_monitor_run_says_the_loop_was_asked_not_that_a_checkpoint_is_saved():
    ctl = RecordingController()
    app = make_app(run_of("monitor"), controller=ctl)
    said = []  # what the app notified, through Textual's public `notify`
    notify = app.notify
    app.notify = lambda message, *args, **kwargs: (said.append(message), notify(message, *args, **kwargs))[1]
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.state.step == 20)
        await pilot.press("q", "y")
        await until(pilot, lambda: ctl.calls == [("stop", "dashboard", "quit")])
        assert "stop asked: leaving when the loop ends" in said and not any("checkpoint" in m for m in said), said


def ended_run(tmp_path, pid: int):
    """A watched run whose run.json says completed before its events file shows the end."""
    write_jsonl(tmp_path / "events.jsonl", recorded_run(epochs=1, total_epochs=3, end="running"))
    (tmp_path / "run.json").write_text(json.dumps({"status": "completed", "pid": pid}))
    ctl = RecordingController()
    return DashboardApp(FileSource(tmp_path, poll=0.02), ctl, watch=True, clock=lambda: T0), ctl


@sync
async def test_a_run_that_ended_while_its_process_lives_is_not_called_gone(tmp_path):
    app, ctl = ended_run(tmp_path, os.getpid())  # a live process: this one
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.controller is None)
        notice = shown(app.query_one("#notice"))
        assert "the run has ended; keys that steer are off" in notice and "gone" not in notice, notice
        assert app.query_one("#notice") and app.state.final != "killed"
    assert ctl.calls == []


@sync
async def test_a_run_that_ended_and_whose_process_is_gone_says_both(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    app, _ = ended_run(tmp_path, gone.pid)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.controller is None)
        notice = shown(app.query_one("#notice"))
        assert "the run has ended and its process is gone; keys that steer are off" in notice, notice
