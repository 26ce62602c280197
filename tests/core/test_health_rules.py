"""The health rules alone (tuitrain.core.health: values in, verdicts out; SPEC "Health"): the spike
rule against the rule written out afresh, non-finite values, how often a rule speaks, and the [watch]
table's errors. Trouble in real training: tests/health/test_health.py."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import Clock
from tuitrain.core.health import Health, Spike, Watch


def _limit(kept: list[float], sigmas: float, ratio: float) -> float:
    """The spike rule as SPEC "Health" and Spike's docstring state it, written out afresh."""
    o = sorted(kept)
    med = statistics.median(o)
    spread = (o[(len(o) * 9) // 10] - med) / 1.2816
    top = o[-1]
    return max(med + sigmas * spread, top + (ratio - 1) * abs(top))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-10.0, 10.0) | st.floats(0.001, 1e4), min_size=70, max_size=300),
    st.floats(2.0, 8.0),
    st.floats(1.0, 8.0),
)
def test_a_spike_is_far_above_the_windows_spread_and_its_largest_value_after_the_warm_up(values, sigmas, ratio):
    window = 128
    rule = Spike(window, sigmas, ratio)
    for i, v in enumerate(values):
        kept = list(rule.values)
        spike = rule.judge(v)
        if len(kept) < window // 2:
            assert not spike  # warming up
        else:
            limit = _limit(kept, sigmas, ratio)
            if abs(v - limit) > 1e-6 * max(1.0, abs(limit)):  # not on the edge, where rounding decides
                assert spike == (v > limit), (i, v, limit)
        if not spike:
            rule.push(v)
        assert len(rule.values) <= window and sorted(rule.values) == rule.ordered


@given(st.lists(st.sampled_from([math.nan, math.inf, -math.inf, 1.0]), min_size=1, max_size=50))
def test_non_finite_values_stay_out_of_the_statistics_and_each_episode_alerts_once(values):
    clock = Clock()
    health = Health(Watch.of({"nonfinite": "alert"}), clock=clock)
    before = 1.0
    for step, v in enumerate(values):
        clock.now += 61  # a minute apart: the once-a-minute limit out of the way
        verdict = health.loss(v, step)
        if not math.isfinite(v) and math.isfinite(before):  # a new episode
            assert verdict is not None and verdict.rule == "nonfinite"
        else:
            assert verdict is None
        before = v
    assert all(math.isfinite(x) for x in health.loss_spike.values)


def test_an_alert_only_rule_speaks_once_a_minute_and_then_says_what_came_between():
    clock = Clock()
    health = Health(Watch(), clock=clock)
    said = []
    for step in range(1, 2001):
        clock.now += 0.01  # 100 steps a second
        burst = {300: 1e3, 301: 1e5, 302: 1e7, 500: 1e3, 700: 1e3, 900: 1e3}  # 301 and 302 each far above the last
        verdict = health.loss(burst.get(step, 1.0 + 0.01 * (step % 7)), step)
        if verdict is not None:
            said.append((step, verdict.episode, verdict.held))
    assert said == [(300, 1, 0)]  # 300-302 are one episode; 500, 700, 900 fall within its minute
    clock.now += 60
    verdict = health.loss(1e9, 2001)
    assert (verdict.episode, verdict.held) == (5, 3) and "3 more spike(s) since the previous alert" in verdict.text
    assert health.spikes["loss_spike"] == 7


def test_an_acting_rule_acts_on_every_spike_each_alert_naming_its_episode():
    health = Health(Watch.of({"loss_spike": "skip"}), clock=Clock())
    found = []
    for step in range(1, 301):
        v = 100.0 if step in (100, 101, 140, 200) else 1.0 + 0.01 * (step % 5)
        verdict = health.loss(v, step)
        if verdict is not None:
            found.append((step, verdict.episode))
    assert found == [(100, 1), (101, 1), (140, 2), (200, 3)]


@pytest.mark.parametrize(
    "table, said",
    [
        ({"loss_spike": "explode"}, "watch.loss_spike"),
        ({"stall": "soon"}, "watch.stall"),
        ({"spike_window": 2}, "watch.spike_window"),
        ({"colour": 1}, "watch.colour"),
        ({"rollback_lr_factor": 2.0}, "watch.rollback_lr_factor"),
    ],
)
def test_a_wrong_watch_table_is_named_in_the_error(table, said):
    with pytest.raises(ValueError, match=said.replace(".", r"\.")):
        Watch.of(table)
