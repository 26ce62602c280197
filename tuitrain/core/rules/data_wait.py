"""`data_wait`: more than this share of step time waits for the next batch (the logged `data_wait`):
an alert once an episode, until it falls back under the share, at most once a minute. 0: off."""

from __future__ import annotations

import math
from typing import Any

from .base import Key, Rule, Verdict


def _share(v: float) -> str | None:
    return None if v <= 1 else f"expected a share of step time from 0 to 1 (0: off), got {v!r}"


class DataWait(Rule):
    name = "data_wait"
    keys = (Key.number("data_wait", 0.5, _share),)
    reads = ("logged",)
    order = 50

    @property
    def on(self) -> bool:
        return bool(self.watch.data_wait)

    def judge_logged(self, values: dict[str, Any], step: int, each_step: bool) -> Verdict | None:
        share = values.get("data_wait")
        limit = self.watch.data_wait
        if not isinstance(share, float) or not math.isfinite(share):
            return None
        speaker = self.speaker
        if share <= limit:
            speaker.in_episode = False
            return None
        self.found += 1
        if not speaker.finding(True, self.clock()):
            return None
        speaker.said()
        return Verdict(
            "data_wait",
            "alert",
            share,
            f"training waits for data at step {step}",
            f"{share:.0%} of step time waits for the next batch (more than {limit:.0%}): the data "
            "loader is too slow (more num_workers, faster decoding, data nearer the machine)",
            episode=speaker.episode,
        )
