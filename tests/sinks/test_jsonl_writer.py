import json
import threading

from sink_run import feed, run_events
from tests.conftest import wait_for
from tuitrain.core.events import MetricsLogged, RunStarted, parse_line
from tuitrain.sinks.jsonl import FILENAME, JsonlWriter


def read_events(path):
    return [parse_line(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_round_trips_every_persistent_event_exactly(tmp_path):
    events = run_events(tmp_path)
    w = JsonlWriter(tmp_path)
    feed(w, events)
    w.close()
    back = read_events(tmp_path / "events.jsonl")
    assert back == [e for e in events if e.persistent]
    assert not any(type(e).__name__ in ("StepStarted", "StepCompleted") for e in back)
    losses = [e.metrics["loss"] for e in back if isinstance(e, MetricsLogged) and e.split == "valid"]
    assert losses[-1] == 0.1 + 0.2 and losses[-1] != 0.3
    for line in (tmp_path / "events.jsonl").read_text().splitlines():
        d = json.loads(line)
        assert isinstance(d["event"], str) and isinstance(d["time"], float)


def test_special_floats_and_unicode_read_back(tmp_path):
    w = JsonlWriter(tmp_path)
    e = MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": float("inf"), "ε": 5e-324}, time=1.5)
    w(e)
    w.close()
    (back,) = read_events(tmp_path / "events.jsonl")
    assert back.metrics == {"loss": float("inf"), "ε": 5e-324}


def test_resumed_run_appends_and_mends_a_torn_last_line(tmp_path):
    first = [e for e in run_events(tmp_path) if e.persistent][:5]
    w = JsonlWriter(tmp_path)
    feed(w, first)
    w.close()
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"event":"MetricsLogged","spl')  # killed mid-line
    second = run_events(tmp_path, resumed_from="checkpoint/epoch-1.pt", start_epoch=2)
    w = JsonlWriter(tmp_path)
    feed(w, second)
    w.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    back = [parse_line(line) for line in lines]
    assert back[:5] == first
    assert back[5] is None  # the torn line stays on its own
    assert back[6:] == [e for e in second if e.persistent]


def test_important_events_are_visible_at_once_and_others_within_the_interval(tmp_path):
    w = JsonlWriter(tmp_path, flush_interval=1.0)
    path = tmp_path / "events.jsonl"
    w(RunStarted(run_dir=str(tmp_path), experiment="x", epochs=1, max_steps=0, steps_per_epoch=1, batch_size=1))
    assert len(path.read_text().splitlines()) == 1  # flushed with no delay
    w(MetricsLogged(split="train", epoch=1, step=1, metrics={"loss": 1.0}))
    assert len(path.read_text().splitlines()) == 1  # held back for now
    # the background flush writes it without a later event
    wait_for(lambda: len(path.read_text().splitlines()) == 2, timeout=10, what="the background flush")
    assert path.read_text().endswith("\n")
    w.close()
    w(MetricsLogged(split="train", epoch=1, step=2, metrics={"loss": 1.0}))  # after close: ignored
    assert len(path.read_text().splitlines()) == 2


def test_on_a_bus_the_run_s_writer_writes_each_batch_at_its_end_and_starts_no_thread(tmp_path):
    from tuitrain.core.callbacks import EventBus
    from tuitrain.core.housekeeping import Housekeeping

    bus = EventBus(housekeeping=Housekeeping(inline=True), batch_interval=60)
    w = JsonlWriter(tmp_path, background=False)
    bus.subscribe(w, steps=False)
    path = tmp_path / FILENAME
    for step in range(1, 4):
        bus.emit(MetricsLogged(split="train", epoch=1, step=step, metrics={"loss": 1.0}))
    assert path.read_text() == ""  # held by the bus, as a batch
    bus.deliver()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]
    bus.emit(MetricsLogged(split="train", epoch=1, step=4, metrics={"loss": 1.0}))
    assert len(path.read_text().splitlines()) == 3  # held for the bus's next batch
    assert w._flusher is None  # no thread of its own that could write it in between
    assert not [t for t in threading.enumerate() if t.name == "tuitrain-jsonl"]
    bus.close()
    assert len(path.read_text().splitlines()) == 4
