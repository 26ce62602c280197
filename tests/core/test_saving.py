"""When to save (core/saving.py): every moment of a run against every setting, decided by the one policy.

The expected decisions are written out by hand from what the loop, the Learner and Monitor did before the
policy was one module (loop.py's epoch end and step boundary, the Learner's final and requested saves,
Monitor's reason for a save of the user's own loop)."""

from __future__ import annotations

import itertools

import pytest

from tuitrain.core.checkpoint import Checkpointer
from tuitrain.core.saving import Boundary, Call, End, EpochEnd, Request, Save, SavePolicy, Stop, StepDone

SETTINGS = [
    SavePolicy(every_n_epochs=e, every_n_steps=n, on_stop=s)
    for e, n, s in itertools.product((0, 1, 2), (0, 1, 3), (True, False))
]
STEP, EPOCH = Save("step"), Save("epoch")


def moments():
    """Every kind of moment, in the variants that change a decision."""
    for step in (1, 2, 3, 6, 7):
        yield StepDone(step)
    for due, held in itertools.product((None, STEP), (False, True)):
        yield Boundary(due, held=held)
    for epoch, last, due in itertools.product((1, 2, 3, 4), (False, True), (None, STEP)):
        yield EpochEnd(epoch, last=last, due=due)
    for by in ("dashboard", "command", "api"):
        yield Request(by)
    for source, failed in itertools.product(
        ("dashboard", "signal", "command", "watch", "max_time", "preempted"), (False, True)
    ):
        yield Stop(source, failed=failed)
    for why in (
        "epochs",
        "max_steps",
        "early_stopping",
        "max_time",
        "stopped",
        "preempted",
        "pruned",
        "killed",
        "failed",
    ):
        for source in ("", "dashboard", "signal", "watch", "max_time", "preempted", "pruned"):
            yield End(why, source)
    for reason, by, taken, stopping in itertools.product(
        ("", "stop", "epoch-end"), ("", "dashboard"), (False, True), (False, True)
    ):
        for source in ("signal", "watch"):
            yield Call(reason, by, taken, stopping, source)


def expected(policy: SavePolicy, m) -> Save | None:
    """The decision, spelled out as the loop, the Learner and Monitor made it before."""
    if isinstance(m, StepDone):
        return STEP if policy.every_n_steps and m.step % policy.every_n_steps == 0 else None
    if isinstance(m, Boundary):
        return m.due if m.due is not None and not m.held else None
    if isinstance(m, EpochEnd):
        on_epoch = bool(policy.every_n_epochs) and m.epoch % policy.every_n_epochs == 0
        if m.last or not (on_epoch or m.due is not None):
            return None
        return EPOCH if on_epoch else STEP
    if isinstance(m, Request):
        return Save("request", m.by)
    if isinstance(m, Stop):
        person = m.source in ("dashboard", "signal", "command")
        return Save("stop", "stop" if person else "") if policy.on_stop and not m.failed else None
    if isinstance(m, End):
        if m.why in ("killed", "failed"):
            return None
        if m.why in ("stopped", "preempted", "pruned"):
            person = m.why == "stopped" and m.source in ("dashboard", "signal")
            return Save("stop", "stop" if person else "")
        return Save("end")
    if isinstance(m, Call):
        if not m.by and m.stopping and (m.taken or m.reason in ("", "stop")):
            return Save(m.reason or "stop", "stop" if m.source == "signal" else "")
        return Save(m.reason or ("request" if m.by else "api"), m.by)
    raise AssertionError(m)


@pytest.mark.parametrize("policy", SETTINGS, ids=repr)
def test_every_moment_under_every_setting(policy):
    seen = 0
    for m in moments():
        assert policy.decide(m) == expected(policy, m), m
        seen += 1
    assert seen > 100


def test_the_periodic_saves():
    every_2_and_3 = SavePolicy(every_n_epochs=2, every_n_steps=3)
    assert [s for s in range(1, 10) if every_2_and_3.decide(StepDone(s))] == [3, 6, 9]
    assert every_2_and_3.decide(EpochEnd(2)) == Save("epoch")
    assert every_2_and_3.decide(EpochEnd(3)) is None
    # a step save still due at an epoch's end is saved there, as a step save; the epoch's own wins
    assert every_2_and_3.decide(EpochEnd(3, due=STEP)) == STEP
    assert every_2_and_3.decide(EpochEnd(4, due=STEP)) == EPOCH
    # the last epoch saves nothing of its own: the final save follows
    assert every_2_and_3.decide(EpochEnd(4, last=True, due=STEP)) is None
    never = SavePolicy(every_n_epochs=0, every_n_steps=0)
    assert not any(never.decide(StepDone(s)) for s in range(1, 100))
    assert never.decide(EpochEnd(1)) is None


def test_a_step_save_waits_at_a_held_boundary():
    p = SavePolicy(every_n_steps=5)
    due = p.decide(StepDone(10))
    assert p.decide(Boundary(due, held=True)) is None  # a validation under way, an epoch's last batch
    assert p.decide(Boundary(due)) == Save("step")
    assert p.decide(Boundary(None)) is None


def test_the_final_save_says_why_and_whose():
    p = SavePolicy()
    assert p.decide(End("epochs")) == Save("end")
    assert p.decide(End("max_time", "max_time")) == Save("end")  # max_time: completed, the run's own
    assert p.decide(End("stopped", "dashboard")) == Save("stop", "stop")  # a person's stop: theirs
    assert p.decide(End("stopped", "watch")) == Save("stop", "")  # a [watch] rule's: the run's own
    assert p.decide(End("preempted", "preempted")) == Save("stop", "")  # a preemption: the run's own
    assert p.decide(End("pruned", "pruned")) == Save("stop", "")
    assert p.decide(End("killed")) is None and p.decide(End("failed")) is None


def test_a_request_and_a_stop():
    assert SavePolicy(every_n_epochs=0).decide(Request("dashboard")) == Save("request", "dashboard")
    assert SavePolicy().decide(Stop("signal")) == Save("stop", "stop")
    assert SavePolicy().decide(Stop("watch")) == Save("stop", "")
    assert SavePolicy(on_stop=False).decide(Stop("signal")) is None  # an integration saves at a stop itself
    assert SavePolicy().decide(Stop("signal", failed=True)) is None  # the run directory cannot be written


def test_a_save_of_the_users_own_loop():
    p = SavePolicy()
    assert p.decide(Call()) == Save("api")
    assert p.decide(Call(by="dashboard", taken=True)) == Save("request", "dashboard")
    assert p.decide(Call(reason="best")) == Save("best")
    # after a person's stop: the stop's checkpoint, theirs
    assert p.decide(Call(stopping=True, source="signal")) == Save("stop", "stop")
    assert p.decide(Call(reason="best", stopping=True, taken=True, source="signal")) == Save("best", "stop")
    # a reason of the caller's, with no request pending, is not the stop's
    assert p.decide(Call(reason="best", stopping=True, source="signal")) == Save("best")


def test_the_policy_of_a_checkpointer(tmp_path):
    c = Checkpointer(tmp_path / "checkpoint", every_n_epochs=3, every_n_steps=7)
    assert SavePolicy.of(c) == SavePolicy(every_n_epochs=3, every_n_steps=7, on_stop=True)
    assert SavePolicy.of(None) == SavePolicy(every_n_epochs=0, every_n_steps=0)
    assert SavePolicy.of(c, on_stop=False).on_stop is False


def test_not_a_moment_is_refused():
    with pytest.raises(TypeError, match="not a moment"):
        SavePolicy().decide("epoch")  # type: ignore[arg-type]
