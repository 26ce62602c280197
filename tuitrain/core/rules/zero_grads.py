"""`zero_grads`: the gradients' total norm exactly 0 at `zero_grads_steps` judged steps in a row: nothing
learns. A non-differentiable op in the forward pass (`round`, `argmax`, a comparison) cuts every
gradient, as does a loss that does not depend on the weights or a ReLU network whose units all died.
"off", "alert" or "stop"; one alert an episode (until a norm above 0 ends it), an alert-only rule at
most once a minute. It reads the norm where the spike rule does (the steps that log), so it costs no
sync of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import Key, Rule, Verdict, doing


class ZeroGrads(Rule):
    name = "zero_grads"
    keys = (Key.choice("zero_grads", "alert", ("off", "alert", "stop")), Key.whole("zero_grads_steps", 3, least=1))
    action_key = "zero_grads"
    reads = ("grad_norm",)
    order = 60

    def __init__(self, watch: Any, clock: Callable[[], float]) -> None:
        super().__init__(watch, clock)
        self.zeros = 0  # judged norms of exactly 0 in a row

    def judge_grad_norm(self, v: float, step: int) -> Verdict | None:
        if v != 0.0:
            self.zeros = 0
            self.speaker.in_episode = False
            return None
        self.zeros += 1
        if self.zeros < self.watch.zero_grads_steps:
            return None
        self.found += 1
        action, speaker = self.action, self.speaker
        if not speaker.finding(action == "alert", self.clock()):
            return None
        held = speaker.said() if action == "alert" else 0
        text = (
            f"the gradients' norm is 0 at {self.zeros} judged steps in a row (step {step}): nothing learns "
            "(a round, argmax or comparison in the forward pass, or a loss that does not depend on the weights)"
        )
        if held:
            text += f"; {held} more since the previous alert"
        return Verdict(
            self.name,
            action,
            v,
            f"zero gradients at step {step}",
            text + doing(action),
            episode=speaker.episode,
            held=held,
        )
