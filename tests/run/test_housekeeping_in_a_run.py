"""Housekeeping in real runs (tuitrain.core.housekeeping, the chores' unit tests in
tests/core/test_housekeeping.py): a headless run that trains with no helper thread at all, and slow
steps that move the chores to threads."""

from __future__ import annotations

import threading

import tuitrain.core.housekeeping as housekeeping_module
from tuitrain.core.control import FileControl
from tuitrain.core.events import DevicesSampled, MetricsLogged, RunStarted
from tuitrain.run.runner import prepare_run


def helper_threads(before: frozenset = frozenset()) -> list[str]:
    """This process's tuitrain threads, but those in `before` (an earlier test's bus may still have one)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("tuitrain-") and t not in before)


def threads_now() -> frozenset:
    return frozenset(threading.enumerate())


def test_a_headless_run_trains_with_no_helper_thread_yet_samples_devices_and_obeys_control(
    tiny, forget_tinyproj, monkeypatch
):
    monkeypatch.setenv("TUITRAIN_DEVICES_INTERVAL", "0.05")
    # a loaded machine can stall a process for a second, which rightly moves the chores to threads;
    # this test is about the loop doing them, so only a minute's gap would
    monkeypatch.setattr(housekeeping_module, "MAX_GAP", 60.0)
    run = prepare_run(tiny.config, ["model.sleep=0.01", "train.epochs=12", "checkpoint.every_n_epochs=0"])
    seen: list[tuple[int, list[str]]] = []
    devices = []
    before = threads_now()

    def watch(event, state):
        if isinstance(event, MetricsLogged) and event.scope == "step" and event.split == "train":
            seen.append((event.step, helper_threads(before)))
            if event.step == 3:  # as `tuitrain checkpoint RUN` does
                FileControl(run.run_dir).send("checkpoint", "test")
        elif isinstance(event, DevicesSampled):
            devices.append(event)

    run.subscribe(watch, steps=False)
    assert run.execute() == 0
    # a checkpoint's writer thread may still run after a save, and the stall watchdog ([watch] stall,
    # 10 minutes by default) waits for a step that never comes, waking every 30 s at most; nothing else
    assert all(set(names) <= {"tuitrain-checkpoint", "tuitrain-watchdog"} for _, names in seen), seen
    assert all(names.count("tuitrain-watchdog") <= 1 for _, names in seen), seen
    assert len(devices) >= 2  # sampled by the loop itself
    index = (run.run_dir / "checkpoint" / "index.json").read_text()
    assert '"request"' in index  # the control folder was polled by the loop


def test_slow_steps_move_the_chores_to_threads_which_keep_their_pace(tiny, forget_tinyproj, monkeypatch):
    monkeypatch.setenv("TUITRAIN_DEVICES_INTERVAL", "0.05")
    monkeypatch.setattr(housekeeping_module, "MAX_GAP", 0.15)
    run = prepare_run(
        tiny.config, ["model.sleep=1.0", "train.epochs=1", "train.max_steps=4", "checkpoint.every_n_epochs=0"]
    )
    order: list[str] = []
    threads_at: dict[int, list[str]] = {}
    before = threads_now()

    def watch(event, state):
        if isinstance(event, MetricsLogged) and event.scope == "step" and event.split == "train":
            order.append(f"step{event.step}")
            threads_at[event.step] = helper_threads(before)
        elif isinstance(event, DevicesSampled):
            order.append("devices")
        elif isinstance(event, RunStarted):
            order.append("start")

    run.subscribe(watch, steps=False)
    assert run.execute() == 0
    assert set(threads_at[1]) <= {"tuitrain-watchdog"} or "tuitrain-devices" in threads_at[1]
    assert "tuitrain-devices" in threads_at[3] and "tuitrain-control" in threads_at[3]
    # while steps 2-4 slept (3 s) the device thread kept sampling: every 0.05 s on a quiet machine (60
    # samples); a loaded one oversleeps a 0.05 s wait by up to 0.6 s (seen here), so at least one a step
    between = order[order.index("step1") + 1 : order.index("step4")]
    assert between.count("devices") >= 3, order
