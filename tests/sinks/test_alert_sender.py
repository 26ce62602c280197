"""`AlertSender` never storms a webhook (SPEC "Health"): a rule is posted at most once a minute, what
comes in between is held and posted as one digest once the minute is up, or at `close()`. A real
HTTP receiver on 127.0.0.1; the sender's clock is the test's."""

from __future__ import annotations

import time

import pytest

from tests.conftest import Clock, Receiver
from tuitrain.core.events import AlertRaised
from tuitrain.core.health import Alerts
from tuitrain.sinks.alerts import AlertSender


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def alert(rule: str, step: int) -> AlertRaised:
    return AlertRaised(
        rule=rule,
        level="warning",
        title=f"{rule} at step {step}",
        text=f"value at step {step}",
        step=step,
        value=float(step),
        action="skip",
    )


def wait_for(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def sender_to(receiver: Receiver, clock: Clock) -> AlertSender:
    return AlertSender(Alerts(webhook=receiver.url), run_dir="runs/x/1", experiment="x", clock=clock)


def test_a_burst_of_one_rule_is_one_post_then_one_digest_of_the_rest_once_the_minute_is_up(receiver):
    clock = Clock()
    sender = sender_to(receiver, clock)
    for step in range(1, 51):
        sender(alert("loss_spike", step), None)
        clock.now += 0.1  # 50 in 5 seconds
    wait_for(lambda: receiver.got)
    time.sleep(1.5)  # the thread wakes while it holds alerts: nothing more is due yet
    assert [g["step"] for g in receiver.got] == [1]
    assert "held_back" not in receiver.got[0] and "more" not in receiver.got[0]["text"]
    clock.now += 30  # 35 s after the first post: still held
    time.sleep(1.0)
    assert len(receiver.got) == 1
    clock.now += 25  # 60 s after it
    wait_for(lambda: len(receiver.got) == 2)
    last = receiver.got[1]
    assert last["step"] == 50 and last["rule"] == "loss_spike"  # the newest held
    assert last["held_back"] == 49 and "49 more loss_spike alerts" in last["text"]
    assert last["text"].startswith("[tuitrain] x: loss_spike at step 50. value at step 50")
    sender.close()
    assert len(receiver.got) == 2  # nothing was left held


def test_two_rules_are_each_posted_at_once(receiver):
    clock = Clock()
    sender = sender_to(receiver, clock)
    sender(alert("loss_spike", 10), None)
    sender(alert("grad_spike", 10), None)
    wait_for(lambda: len(receiver.got) == 2)
    assert sorted(g["rule"] for g in receiver.got) == ["grad_spike", "loss_spike"]
    sender(alert("grad_spike", 11), None)  # within the minute: held
    sender.close()  # ... and sent at close, as a digest
    assert len(receiver.got) == 3
    assert receiver.got[2]["rule"] == "grad_spike" and receiver.got[2]["held_back"] == 1
    assert "1 more grad_spike alert since" in receiver.got[2]["text"]


def test_close_sends_what_is_held_as_one_digest_a_rule_within_the_timeout(receiver):
    clock = Clock()
    sender = sender_to(receiver, clock)
    for step in range(1, 8):
        sender(alert("loss_spike", step), None)
        sender(alert("nonfinite", step), None)
    wait_for(lambda: len(receiver.got) == 2)
    t0 = time.monotonic()
    sender.close()
    assert time.monotonic() - t0 < sender.timeout
    assert len(receiver.got) == 4
    digests = {g["rule"]: g for g in receiver.got[2:]}
    assert {r: (g["step"], g["held_back"]) for r, g in digests.items()} == {"loss_spike": (7, 6), "nonfinite": (7, 6)}


def test_a_rule_sent_more_than_a_minute_ago_is_sent_at_once_again(receiver):
    clock = Clock()
    sender = sender_to(receiver, clock)
    sender(alert("stall", 1), None)
    wait_for(lambda: len(receiver.got) == 1)
    clock.now += 61
    sender(alert("stall", 2), None)
    wait_for(lambda: len(receiver.got) == 2)
    assert receiver.got[1]["step"] == 2 and "held_back" not in receiver.got[1]
    sender.close()
    assert len(receiver.got) == 2
