"""`ConfirmScreen`: "stop training and leave?"; `y` confirms, any other key cancels.

Dismissed with "stop" (y), "leave" (l, only when offered: watching a run in another process) or
"cancel" (anything else).
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[str]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    #confirm-box { width: auto; max-width: 90%; height: auto; padding: 1 2; }
    #confirm-box Static { width: auto; }
    """

    def __init__(self, question: str = "Stop training and leave?", offer_leave: bool = False) -> None:
        super().__init__()
        self.question = question
        self.offer_leave = offer_leave

    def compose(self) -> ComposeResult:
        keys = "y: stop gracefully (checkpoint saved) and leave"
        if self.offer_leave:
            keys += "\nl: leave, the run goes on"
        keys += "\nany other key: cancel"
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            yield Static(keys, id="confirm-keys")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        if event.key == "y":
            self.dismiss("stop")
        elif event.key == "l" and self.offer_leave:
            self.dismiss("leave")
        else:
            self.dismiss("cancel")

    def on_click(self, event: events.Click) -> None:
        if event.widget is self:  # a click outside the box cancels, as any key does
            self.dismiss("cancel")
