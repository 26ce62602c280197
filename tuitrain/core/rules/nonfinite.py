"""`nonfinite`: a NaN or infinite loss or gradient norm. "fail" (exit 1), "skip", "rollback", "stop" or
"alert"; one alert an episode (consecutive non-finite losses), and an alert-only rule once a minute."""

from __future__ import annotations

import math
from typing import Any

from .base import Key, Rule, Verdict, doing

_isfinite = math.isfinite


class NonFinite(Rule):
    name = "nonfinite"
    keys = (Key.choice("nonfinite", "fail", ("fail", "skip", "rollback", "stop", "alert")),)
    action_key = "nonfinite"
    reads = ("loss", "nonfinite", "logged")
    order = 10

    def needs(self, channel: str) -> bool:
        # "fail" needs no loss read back step by step: the logged mean finds it (judge_logged); an
        # alerted non-finite norm is not worth reading one back for
        if channel == "loss":
            return self.action != "fail"
        if channel == "grad_norm":
            return self.action != "alert"
        return channel in self.reads

    def judge_loss(self, v: float, step: int) -> None:
        self.speaker.in_episode = False  # a finite loss ends an episode (a finite norm does not)

    def judge_nonfinite(self, what: str, v: float, step: int) -> Verdict | None:
        action = self.action
        speaker = self.speaker
        self.found += 1
        if not speaker.finding(action == "alert", self.clock()):
            return None
        held = speaker.said() if action == "alert" else 0
        text = (
            f"the {what} {'is' if what == 'loss' else 'have a norm of'} {v} at step {step}"
            + (f"; {held} more since the previous alert" if held else "")
            + doing(action)
        )
        return Verdict(
            "nonfinite",
            action,
            v,
            f"non-finite {what} at step {step}",
            text,
            level="error" if action in ("fail", "stop") else "warning",
            episode=speaker.episode,
            held=held,
        )

    def judge_logged(self, values: dict[str, Any], step: int, each_step: bool) -> Verdict | None:
        """A non-finite mean where the steps were not judged one by one (a window's mean read from an
        accelerator). Judged step by step, an alerted NaN is in the mean, and a failing one failed."""
        loss = values.get("loss")
        if loss is None or not isinstance(loss, float) or _isfinite(loss):
            return None
        if each_step and (self.action != "fail" or self.speaker.in_episode):
            return None
        v = self.judge_nonfinite("loss", loss, step)
        if v is None:  # an alert-only rule that spoke within the minute
            return None
        action = {"skip": "fail"}.get(v.action, v.action)  # the update is in: too late to skip
        return Verdict(v.rule, action, v.value, v.title, v.text, v.level, v.episode, v.held)
