"""Reading events.jsonl back: any bytes, any JSON, any shape give an event or None, never an
exception; each kind of damaged line seen in issue 28 is one test."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from tuitrain.core.events import (
    EVENT_TYPES,
    MAX_LINE,
    DevicesSampled,
    Event,
    MetricsLogged,
    RunFinished,
    RunStarted,
    parse_line,
)

SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON = (
    SCALAR
    | st.lists(SCALAR, max_size=3)
    | st.dictionaries(st.text(max_size=6), SCALAR | st.lists(SCALAR, max_size=2), max_size=3)
)


def good() -> dict:
    return MetricsLogged(split="train", epoch=1, step=3, metrics={"loss": 0.5}, time=1.0).to_dict()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes(raw):
    assert parse_line(raw) is None or isinstance(parse_line(raw), Event)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(EVENT_TYPES)),
    st.dictionaries(
        st.sampled_from(
            [
                "split",
                "epoch",
                "step",
                "metrics",
                "time",
                "text",
                "stream",
                "partial",
                "gpus",
                "cpu_per_core",
                "summary",
                "best",
                "config",
                "env",
                "file",
                "status",
                "error",
                "batches",
                "phase",
                "event",
            ]
        ),
        JSON,
    ),
)
def test_any_json_in_the_shape_of_an_event(name, fields):
    line = json.dumps({"event": name, **fields})
    event = parse_line(line)
    assert event is None or type(event).__name__ == name
    if event is not None:  # what it let through has the types its class says
        for key in fields:
            if hasattr(event, key) and key != "event":
                assert getattr(event, key) == fields[key] or fields[key] != fields[key]  # nan != nan


def test_a_good_line_reads_back_exactly():
    line = json.dumps(good())
    assert parse_line(line) == MetricsLogged(split="train", epoch=1, step=3, metrics={"loss": 0.5}, time=1.0)
    assert parse_line(line.encode()) == parse_line(line)


def with_(**changes) -> str:
    return json.dumps({**good(), **changes})


def test_step_as_a_string():
    assert parse_line(with_(step="3")) is None  # issue 28: a TypeError in the dashboard's model


def test_metrics_as_a_list():
    assert parse_line(with_(metrics=[["loss", 0.5]])) is None


def test_event_not_a_string():
    assert parse_line(with_(event=["MetricsLogged"])) is None
    assert parse_line(with_(event=None)) is None
    assert parse_line("[1, 2]") is None and parse_line("3") is None


def test_bytes_that_are_not_utf8():
    assert parse_line(b'{"event": "OutputPrinted", "text": "\xff\xfe", "time": 1.0}').text == "\ufffd\ufffd"
    assert parse_line(b"\xff" * 50) is None


def test_a_5_mb_line():
    assert parse_line(with_(split="x" * (5 << 20))) is None
    assert parse_line(with_(split="x" * 1000)) is not None
    assert MAX_LINE < 5 << 20


def test_100000_nested_brackets():
    assert parse_line("[" * 100_000) is None  # RecursionError inside json, caught
    assert parse_line(with_(metrics={"m": json.loads("[" * 40 + "]" * 40)})) is None  # nests past MAX_DEPTH
    assert parse_line(with_(metrics={"m": [[1]]})) is not None


def test_numbers_a_reader_cannot_use():
    assert parse_line(with_(time=float("nan"))) is None
    assert parse_line(with_(step=1 << 70)) is None
    assert parse_line(with_(step=True)) is None
    assert parse_line(with_(epoch=1.5)) is None


def test_missing_and_unknown_fields():
    line = good()
    del line["split"]
    assert parse_line(json.dumps(line)) is None
    assert parse_line(with_(newer_field=1)) is not None  # a newer writer's extra key is left out
    assert parse_line(json.dumps({"event": "SomethingNewer", "time": 1.0})) is None


def test_what_readers_iterate_has_the_shape_they_expect():
    base = DevicesSampled(cpu=1.0, cpu_per_core=[1.0], memory=1.0, memory_used=1, memory_total=2, rss=1).to_dict()
    assert parse_line(json.dumps(base)) is not None
    assert parse_line(json.dumps({**base, "gpus": ["GPU0"]})) is None
    assert parse_line(json.dumps({**base, "cpu_per_core": ["12%"]})) is None
    fin = RunFinished(
        status="completed",
        exit_code=0,
        epoch=1,
        step=1,
        reason="epochs",
        duration=1.0,
        summary={"train/loss": {"last": 1.0}},
        best={},
    ).to_dict()
    assert parse_line(json.dumps(fin)) is not None
    assert parse_line(json.dumps({**fin, "summary": {"train/loss": 1.0}})) is None
    started = RunStarted(run_dir="r", experiment="e", epochs=1, max_steps=0, steps_per_epoch=0, batch_size=1).to_dict()
    assert parse_line(json.dumps({**started, "config": "not a table"})) is None
