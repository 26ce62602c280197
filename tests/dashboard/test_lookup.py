"""`StepLookup` (tuitrain/sources/lookup.py): a logged value at a step, exactly, from a run's
events.columns, believed only where events.jsonl still holds the lines it was written from."""

from __future__ import annotations

from tuitrain.core.events import MetricsLogged, RunStarted
from tuitrain.sources.lookup import StepLookup

from .fixtures import T0
from .test_scale import write_with_columns


def run(tmp_path, steps: int = 5_000):
    events = [
        RunStarted(
            run_dir=str(tmp_path), experiment="x", epochs=1, max_steps=0, steps_per_epoch=steps, batch_size=8, time=T0
        )
    ]
    for s in range(1, steps + 1):
        if s % 3 == 0:  # accuracy every third step only
            metrics = {"loss": s / 1000, "accuracy": s / 10_000}
        else:
            metrics = {"loss": s / 1000}
        events.append(
            MetricsLogged(split="train", epoch=1, step=s, batch=s, batches=steps, metrics=metrics, time=T0 + s)
        )
        if s % 1000 == 0:
            events.append(
                MetricsLogged(
                    split="valid",
                    epoch=1,
                    step=s,
                    scope="epoch",
                    batch=1,
                    batches=1,
                    metrics={"loss": s / 2000},
                    time=T0 + s,
                )
            )
    write_with_columns(tmp_path, events, batch=100)


def test_values_are_read_at_the_newest_logged_step_at_or_before_and_only_the_records_that_can_hold_it(tmp_path):
    run(tmp_path)
    look = StepLookup(tmp_path)
    assert look.value("train", "loss", 1234) == (1234.0, 1.234)
    assert look.reads == 1  # one record of the ~60 read
    assert look.value("train", "accuracy", 1234) == (1233.0, 0.1233)  # logged every third step
    assert look.value("valid", "loss", 2999) == (2000.0, 1.0)
    assert look.value("train", "loss", 10**9) == (5000.0, 5.0)
    assert look.value("train", "loss", 0) is None and look.value("train", "nope", 10) is None
    assert StepLookup(tmp_path / "missing").value("train", "loss", 10) is None


def test_a_side_file_that_events_jsonl_no_longer_matches_is_not_believed(tmp_path):
    run(tmp_path)
    jsonl = tmp_path / "events.jsonl"
    data = jsonl.read_bytes()
    at = data.index(b'"step":1234,')
    jsonl.write_bytes(data[:at] + b'"step":1235,' + data[at + len(b'"step":1234,') :])  # same length, other bytes
    look = StepLookup(tmp_path)
    assert look.value("train", "loss", 1234) is None  # the readout falls back to the chart's own points
    assert look.value("train", "loss", 4321) == (4321.0, 4.321)  # other records still match
