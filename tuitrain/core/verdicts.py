"""A `[watch]` rule's verdict said: the `AlertRaised` event it leaves as, one copy for the Learner's
`HealthGuard` (learner_health.py) and for a loop of one's own (`Monitor`, and the Lightning and Hugging
Face integrations through it), and an alert of the loop's own (`Monitor.alert`). Must not import torch
or textual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .events import AlertRaised, Event, OutputPrinted
from .health import Health
from .rules.base import Verdict, doing

#: the levels `Monitor.alert` takes, as W&B's and trackio's alerts have them ("warn" is a warning)
ALERT_LEVELS = {"info": "info", "warning": "warning", "warn": "warning", "error": "error"}


def alert_event(verdict: Verdict, step: int, epoch: int, action: str = "", text: str | None = None) -> AlertRaised:
    """The alert of `verdict` at `step`: its action as taken (`action`, default the verdict's) and the
    text that says it (default the verdict's)."""
    return AlertRaised(
        rule=verdict.rule,
        level=verdict.level,
        title=verdict.title,
        text=verdict.text if text is None else text,
        step=step,
        value=float(verdict.value) if verdict.value is not None else None,
        action=action or verdict.action,
        epoch=epoch,
        episode=verdict.episode,
        held=verdict.held,
    )


def judge_own_loop(
    health: Health,
    metrics: dict[str, Any],
    step: int,
    epoch: int,
    emit: Callable[[Event], None],
    stop: Callable[[str], None],
) -> None:
    """Every rule on the values a loop of one's own logged (`Health.values`). Such a loop is not ours to
    skip a step of or roll back: each verdict is an alert, and a "stop" also asks for a stop (`stop(title)`)."""
    for verdict in health.values(metrics, step):
        action = "stop" if verdict.action == "stop" else "alert"
        text = verdict.text.removesuffix(doing(verdict.action)) + doing(action)
        emit(alert_event(verdict, step, epoch, action, text))
        if action == "stop":
            stop(verdict.title)


def text_of(value: Any) -> str:
    """`value` as a string for an alert, whatever it is (an object whose str() fails: its type)."""
    if isinstance(value, str) or value is None:
        return value or ""
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def number_of(value: Any) -> float:
    """A number, a 0-d tensor (read here: off the loop's thread) or a numpy scalar, as a float."""
    item = getattr(value, "item", None)
    return float(item() if item is not None else value)


class UserAlerts:
    """The alerts a loop raises itself (`Monitor.alert`): any level it is given (one not known is a
    warning, said once a level), any title, text, step or value (never an exception in the loop)."""

    def __init__(self) -> None:
        self.odd_levels: set[str] = set()

    def events(self, title: Any, text: Any, level: Any, step: Any, value: Any, at: int, epoch: int) -> list[Event]:
        """The events of one alert (`at`: the step when `step` is None or not a number)."""
        out: list[Event] = []
        said = text_of(level).strip().lower()
        level = ALERT_LEVELS.get(said, "")
        if not level:
            level = "warning"
            if said not in self.odd_levels:  # once per level, not once per alert
                self.odd_levels.add(said)
                out.append(
                    OutputPrinted(
                        text=f"mon.alert: level {said[:40]!r} is not one of info, warning, error: raised as a warning",
                        stream="tuitrain",
                    )
                )
        try:
            number = None if value is None else number_of(value)
        except (TypeError, ValueError, RuntimeError):
            number = None
        try:
            at = at if step is None else int(step)
        except (TypeError, ValueError):
            pass
        title = text_of(title)
        out.append(
            AlertRaised(
                rule="user", level=level, title=title, text=text_of(text) or title, step=at, value=number, epoch=epoch
            )
        )
        return out
