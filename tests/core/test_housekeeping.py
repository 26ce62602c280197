"""Housekeeping: a run's chores done by the loop itself (no thread) while it comes by often, and on
threads once it does not (real runs: tests/run/test_housekeeping_in_a_run.py)."""

from __future__ import annotations

import threading

from tuitrain.core.callbacks import EventBus
from tuitrain.core.events import DevicesSampled
from tuitrain.core.housekeeping import Housekeeping

from tests.conftest import wait_for


def threads_now() -> frozenset:
    return frozenset(threading.enumerate())


class Chore:
    def __init__(self) -> None:
        self.runs: list[str] = []  # the thread each run happened on
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()

    def __call__(self) -> None:
        self.runs.append(threading.current_thread().name)

    def start_thread(self) -> None:
        def loop():
            while not self.stop.wait(0.01):
                self()

        self.thread = threading.Thread(target=loop, name="chore-thread", daemon=True)
        self.thread.start()


class Clock:
    """A clock the test moves: this machine can stall for half a second, a test's timing must not."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_inline_chores_run_at_ticks_when_due_and_on_no_thread():
    clock = Clock()
    hk = Housekeeping(inline=True, max_gap=5, clock=clock)
    chore = Chore()
    hk.add(0.05, chore, chore.start_thread)
    hk.tick()
    assert chore.runs == []  # not due yet
    for _ in range(60):  # 0.3 s of ticks, one every 0.005 s
        clock.now += 0.005
        hk.tick()
    # every 0.05 s over 0.3 s, each on the ticking thread
    assert 5 <= len(chore.runs) <= 6 and set(chore.runs) == {threading.current_thread().name}
    assert chore.thread is None and hk.inline
    clock.now += 0.04
    hk.tick()
    ran = len(chore.runs)
    clock.now += 0.02  # due again now
    hk.tick()
    assert len(chore.runs) == ran + 1


def test_a_long_gap_between_ticks_moves_every_chore_to_its_thread():
    clock = Clock()
    hk = Housekeeping(inline=True, max_gap=0.1, clock=clock)
    a, b = Chore(), Chore()
    hk.add(0.02, a, a.start_thread)
    hk.add(0.02, b, b.start_thread)
    hk.tick()
    clock.now += 0.15  # a slow step
    hk.tick()
    try:
        assert not hk.inline and a.thread is not None and b.thread is not None
        wait_for(lambda: "chore-thread" in a.runs and "chore-thread" in b.runs, what="chore threads")
        ran = len(a.runs)
        clock.now += 0.05
        hk.tick()  # ticks do nothing any more
        assert a.runs.count(threading.current_thread().name) == 0 and len(a.runs) >= ran
    finally:
        a.stop.set()
        b.stop.set()


def test_without_inline_a_chore_gets_its_thread_at_once():
    hk = Housekeeping()
    chore = Chore()
    hk.add(0.02, chore, chore.start_thread)
    try:
        assert chore.thread is not None and chore.thread.is_alive()
    finally:
        chore.stop.set()


def test_a_chore_that_emits_and_adds_a_chore_does_not_tick_inside_itself():
    before = threads_now()
    hk = Housekeeping(inline=True, max_gap=60)  # a stalled machine must not move the chores to threads
    bus = EventBus(housekeeping=hk)
    got = []
    recorder = lambda e, s: got.append(e)  # noqa: E731
    recorder.batch_events = True
    bus.subscribe(recorder, steps=False)
    nested = []

    def emitting_chore():  # like the device monitor's: its event queues, the bus adds its chore
        bus.emit(DevicesSampled(cpu=1.0, cpu_per_core=[1.0], memory=1.0, memory_used=1, memory_total=2, rss=1))
        nested.append(len(got))

    hk.add(0.0, emitting_chore, lambda: None)
    wait_for(lambda: bus.tick() or nested, timeout=10, what="the chore to run")
    assert nested == [0]  # the chore ran once, its event is held for a batch
    # ticks alone (no later event) until the bus's own chore delivers the held batch
    wait_for(lambda: bus.tick() or got, timeout=10, what="the held batch")
    assert [type(e).__name__ for e in got][:1] == ["DevicesSampled"]
    assert not [t for t in threading.enumerate() if t.name == "tuitrain-events" and t not in before]
    bus.close()
