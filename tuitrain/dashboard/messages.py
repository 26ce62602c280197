"""Messages between the dashboard's threads and its app.

Thread workers reach the app only through `post_message` (thread-safe). Per-step events never
become messages: the bridge buffers them and the app drains it on a timer.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class TrainingEnded(Message):
    """The source's work returned (the exit code) or raised (the error and its traceback)."""

    exit_code: int | None
    error: str = ""
    traceback: str = ""
