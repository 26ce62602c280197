"""`Modal`: a modal screen that is dismissed once.

Keys reach a screen in bursts, as a terminal delivers them: several in one read (fast typing, key repeat,
a paste, a busy app). Textual's `Screen.dismiss` pops whatever screen is on top, so a second key queued
for a dialog before it is gone popped the screen under it: the dashboard itself, or the stack's last screen
("ScreenStackError: Can't pop screen"). A `Modal` answers once: the first dismissal pops it and calls its
callback; any later one (a key or click that reached it while it closed) does nothing.
"""

from __future__ import annotations

from typing import TypeVar

from textual.await_complete import AwaitComplete
from textual.screen import ModalScreen

R = TypeVar("R")


async def _nothing() -> None:
    return None


class Modal(ModalScreen[R]):
    """A `ModalScreen` whose `dismiss` acts once, and only while it is the screen on top."""

    closing = False  # dismissed: it answers nothing more

    def dismiss(self, result: R | None = None) -> AwaitComplete:
        if self.closing or not self.is_current:
            return AwaitComplete(_nothing())
        self.closing = True
        return super().dismiss(result)


__all__ = ["Modal"]
