"""`stall`: no training step completed for `stall` seconds (a watchdog thread reads the step counter,
never the training thread). `stall_action`: "alert" (every thread's stack to the log) or "abort" (the
run fails as stalled and the process exits 1, so a scheduler restarts it from its last checkpoint)."""

from __future__ import annotations

from .base import Key, Rule, Verdict


class Stall(Rule):
    name = "stall"
    keys = (Key.duration("stall", 600.0), Key.choice("stall_action", "alert", ("alert", "abort")))
    action_key = "stall_action"
    reads = ("stall",)
    order = 40

    @property
    def on(self) -> bool:
        return bool(self.watch.stall)

    @property
    def patience(self) -> float:
        """Seconds without a step before the rule speaks (the watchdog's)."""
        return float(self.watch.stall)

    def judge_stall(self, seconds: float, where: str) -> Verdict:
        self.found += 1
        return Verdict(
            "stall",
            self.action,
            seconds,
            f"training stalled {where}",
            f"no training step completed for {seconds:.0f}s ({where})",
            level="error",
        )
