"""`loss_spike` and `grad_spike`: a loss, or the gradients' norm, far above its recent values (`Spike`,
rules/base.py). "off", "alert", "skip", "rollback" or "stop". A value acted on (skip, rollback, stop)
stays out of the statistics; an alerted one goes in (a loss that really moved to a new level stops
alerting). An alert-only rule says one alert a minute, its next alert counting the episodes between;
an acting rule acts on every spike."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from .base import Key, Rule, Spike, Verdict, doing, fmt

ACTIONS = ("off", "alert", "skip", "rollback", "stop")


def _sigmas(v: float) -> str | None:
    return None if v > 0 else f"expected a number above 0, got {v!r}"


def _ratio(v: float) -> str | None:
    return None if v >= 1 else f"expected a number of 1 or more (1: above the largest recent value), got {v!r}"


#: the window both spike rules judge against (SPEC "Health"; chosen on benchmarks/bench_health_corpus.py)
WINDOW = (
    Key.number("spike_sigmas", 6.0, _sigmas),
    Key.number("spike_ratio", 5.0, _ratio),  # and above this many times the largest of the window
    Key.whole("spike_window", 128, least=4),
)


class SpikeRule(Rule):
    """A spike rule over one channel: `what` names the value in the alert, `over` what the window holds."""

    title = what = over = ""

    def __init__(self, watch: Any, clock: Callable[[], float]) -> None:
        super().__init__(watch, clock)
        self.spike = Spike(watch.spike_window, watch.spike_sigmas, watch.spike_ratio)
        self.speaker = self.spike.speaker

    @property
    def values(self) -> deque[float]:
        """The window's values, in arrival order."""
        return self.spike.values

    def judge(self, v: float, step: int) -> Verdict | None:
        rule = self.spike
        limit = rule.limit
        if limit is None or not v > limit:  # all well (every step but a spike's)
            rule.speaker.in_episode = False
            rule.push(v)
            return None
        self.found += 1
        med = rule.median()
        top, n = rule.ordered[-1], len(rule.values)  # as judged: before an alerted value goes in
        action = self.action
        alert_only = action == "alert"
        if alert_only:
            rule.push(v)  # an alerted value stays: the run goes on with it
        speaker = rule.speaker
        if not speaker.finding(alert_only, self.clock()):
            return None
        held = speaker.said() if alert_only else 0
        times = f"{fmt(v / top)} times" if top > 0 else "far above"
        text = (
            f"{self.what} {fmt(v)} at step {step} is {times} the largest of the last {n} {self.over} "
            f"({fmt(top)}; their median {fmt(med)}, limit {fmt(limit)})"
        )
        if held:
            text += f"; {held} more spike(s) since the previous alert"
        return Verdict(
            self.name,
            action,
            v,
            f"{self.title} at step {step}",
            text + doing(action),
            episode=speaker.episode,
            held=held,
        )

    def state_dict(self) -> Any:
        return self.spike.state_dict() if self.on else None

    def load_state_dict(self, d: Any) -> None:
        if self.on and d:
            self.spike.load_state_dict(d)


class LossSpike(SpikeRule):
    name = "loss_spike"
    keys = (Key.choice("loss_spike", "alert", ACTIONS), *WINDOW)
    action_key = "loss_spike"
    reads = ("loss",)
    order = 20
    state_key = "loss"
    title, what, over = "loss spike", "loss", "steps"

    judge_loss = SpikeRule.judge  # no call in between: every step of a CPU run comes here


class GradSpike(SpikeRule):
    name = "grad_spike"
    keys = (Key.choice("grad_spike", "alert", ACTIONS), *WINDOW)
    action_key = "grad_spike"
    reads = ("grad_norm",)
    order = 30
    state_key = "grads"
    title, what, over = "grad-norm spike", "grad_norm", "logged steps"

    judge_grad_norm = SpikeRule.judge
