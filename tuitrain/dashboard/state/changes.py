"""What an event changed on the dashboard: the kinds of change `DashboardState.apply` (model.py) returns
and `Feed` (feed.py) acts on, one class each, in one module (as toolong's messages.py holds the
messages its parts exchange). A kind is the class itself, never an instance: `apply` returns a set of
them (`Changes`), and a reader asks `Plot in changed`, so a misspelt kind is an error where it is
written (a NameError, a type error), not a panel that silently never refreshes.

A new part of the screen that follows the state gets a class here; the state returns it, `Feed`
refreshes the part. Must not import textual.
"""

from __future__ import annotations


class Change:
    """A part of the screen whose data changed (subclassed once per part, never instantiated)."""


class Progress(Change):
    """The progress panel, the title bar and the controls: status, epoch and step, speed, ETA."""


class Plot(Change):
    """The charts' data: a metric's values, the device history, a histogram, the epoch lines."""


class Devices(Change):
    """The devices panel: a new device sample."""


class Checkpoints(Change):
    """The checkpoint list: one saved, deleted, or the best one named."""


class Log(Change):
    """Lines wait for the output panel (`DashboardState.take_lines`)."""


class Media(Change):
    """The samples panel: a logged image or text."""


class Result(Change):
    """The run's final event (finished or failed): its result is there to show."""


class Alerts(Change):
    """A health alert: the alerts' count in the header, the charts' marks."""


class NewEpisode(Change):
    """An alert that begins a new episode of its rule: the bell rings once an episode, not for each skip."""


#: what `apply` returns: the kinds of change, each once
Changes = set[type[Change]]

__all__ = [
    "Alerts",
    "Change",
    "Changes",
    "Checkpoints",
    "Devices",
    "Log",
    "Media",
    "NewEpisode",
    "Plot",
    "Progress",
    "Result",
]
