"""The EventBus: immediate and batched callbacks, order, and when a batch is delivered."""

from __future__ import annotations

import time

from tuitrain.core.callbacks import EventBus
from tuitrain.core.events import CheckpointSaved, DevicesSampled, MetricsLogged, OutputPrinted, PhaseStarted


def logged(step: int) -> MetricsLogged:
    return MetricsLogged(split="train", epoch=1, step=step, metrics={"loss": 1.0 / step}, scope="step")


class Recorder:
    batch_events = True
    step_events = False

    def __init__(self) -> None:
        self.seen: list = []
        self.closed = False

    def __call__(self, event, state) -> None:
        self.seen.append(event)

    def close(self) -> None:
        self.closed = True


def test_batched_callback_gets_frequent_events_when_another_event_comes():
    bus = EventBus(batch_interval=60)
    now, later = [], Recorder()
    bus.subscribe(lambda e, s: now.append(e), steps=False)
    bus.subscribe(later)
    for step in range(1, 6):
        bus.emit(logged(step))
    bus.emit(OutputPrinted(text="hello", stream="stdout"))
    assert len(now) == 6 and later.seen == []  # queued: metrics and output may wait
    started = PhaseStarted(phase="valid", split="valid", epoch=1, step=5, batches=3)
    bus.emit(started)
    assert later.seen == now and later.seen[-1] is started  # same events, same order
    assert [e.step for e in later.seen[:5]] == [1, 2, 3, 4, 5]


def test_batch_is_delivered_once_its_oldest_event_is_older_than_the_interval():
    now = [1000.0]  # the bus's clock, moved by the test: a stalled machine must not deliver early
    bus = EventBus(batch_interval=0.05, clock=lambda: now[0])
    rec = Recorder()
    bus.subscribe(rec)
    bus.emit(logged(1))
    now[0] += 0.02
    bus.emit(logged(2))
    assert rec.seen == []
    now[0] += 0.04
    # a device sample from the monitor thread delivers the stale lines
    bus.emit(DevicesSampled(cpu=1.0, cpu_per_core=[1.0], memory=1.0, memory_used=1, memory_total=2, rss=1))
    assert [type(e).__name__ for e in rec.seen] == ["MetricsLogged", "MetricsLogged", "DevicesSampled"]


def test_close_delivers_what_is_queued_before_closing_the_callbacks():
    bus = EventBus(batch_interval=60)
    rec = Recorder()
    bus.subscribe(rec)
    bus.emit(logged(7))
    bus.close()
    assert [e.step for e in rec.seen] == [7] and rec.closed


def test_a_failing_batched_callback_is_reported_once_and_others_still_get_every_event():
    bus = EventBus(batch_interval=60)
    good = Recorder()

    def broken(event, state):
        raise RuntimeError("disk on fire")

    broken.batch_events = True
    bus.subscribe(broken)
    bus.subscribe(good)
    bus.emit(logged(1))
    bus.emit(
        CheckpointSaved(
            file="c.pt", epoch=1, step=1, metrics={}, bytes=1, best=False, reason="step", stall=0.0, write=0.0
        )
    )
    assert [type(e).__name__ for e in good.seen][:2] == ["MetricsLogged", "CheckpointSaved"]
    assert len(bus.errors) == 1  # said once per callback and error, whatever kind of event it failed on
    bus.deliver()  # the report is printed output: it comes with the next batch
    assert any("disk on fire" in e.text for e in good.seen if isinstance(e, OutputPrinted))


def test_sampled_callbacks_get_a_phase_s_first_steps_then_one_step_per_interval_with_every_item(monkeypatch):
    """steps="sampled": the loop keeps its fast path; the callback gets the first steps of each phase
    (a screen can show a speed even for short phases), then one StepCompleted per interval, and the
    phase's last step."""
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from tuitrain.core.events import StepCompleted
    from tuitrain.core.learner import CoreLearner
    from tuitrain.core import loop
    from tuitrain.core.callbacks import StepSampler
    from tuitrain.core.phases import TrainPhase

    got = []

    def progress(event, state):
        if isinstance(event, StepCompleted):
            got.append(event)

    bus = EventBus()
    bus.subscribe(progress, steps="sampled")
    assert bus.step_mode == "sampled" and bus.wants_sampled_steps and not bus.wants_steps
    used_plain = []
    plain = loop.Loop.plain_epoch
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(400, 3, generator=g), torch.randn(400, 1, generator=g))
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    phase = TrainPhase()
    monkeypatch.setattr(loop.Loop, "plain_epoch", lambda *a: used_plain.append(1) or plain(*a))
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        loss_fn=nn.MSELoss(),
        bus=bus,
        device="cpu",
        batch_size=4,
        epochs=2,
        train_phase=phase,
    )
    assert learner.fit(ds).exit_code == 0
    assert used_plain == [1, 1]  # the fast loop ran in both epochs
    train = [e for e in got if e.phase == "train"]
    for epoch in (1, 2):
        steps = [e.step for e in train if e.epoch == epoch]
        first = (epoch - 1) * 100
        assert steps[: StepSampler.FIRST] == [first + 1, first + 2, first + 3]
        assert steps[-1] == first + 100  # the phase's last step too (a speed over the whole phase)
        assert len(steps) < 100  # sampled, not every step
        # every step's items are counted once: 100 steps of 4 items per epoch
        assert sum(e.items for e in train if e.epoch == epoch) == 4 * 100
    with __import__("pytest").raises(ValueError):
        bus.subscribe(progress, steps="sometimes")


def test_without_later_events_the_delivery_thread_sends_a_batch_then_ends_when_idle(monkeypatch):
    import threading

    import tuitrain.core.callbacks as callbacks

    monkeypatch.setattr(callbacks, "TICKER_IDLE", 0.5)
    bus = EventBus(batch_interval=0.05)  # no inline housekeeping: the bus gets its own thread
    rec = Recorder()
    bus.subscribe(rec)

    def ticker():
        return [t for t in threading.enumerate() if t.name == "tuitrain-events" and t is bus._ticker]

    for round_ in (1, 2):  # the second time, a new thread is started
        bus.emit(logged(round_))
        assert ticker()
        deadline = time.monotonic() + 60
        while len(rec.seen) < round_ and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [e.step for e in rec.seen] == list(range(1, round_ + 1))  # no later event was needed
        while bus._ticker is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bus._ticker is None  # idle: the thread ended
    bus.close()
