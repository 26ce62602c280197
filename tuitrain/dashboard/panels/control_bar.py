"""`ControlBar`: the Stop / Pause / Checkpoint buttons; it posts `ControlBar.Requested(command)`."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button


class ControlBar(Horizontal):
    """Buttons for the mouse; the keys c, p and q do the same through the app."""

    DEFAULT_CSS = """
    ControlBar { height: 1; width: auto; }
    ControlBar Button { margin: 0 1 0 0; min-width: 10; }
    """

    @dataclass
    class Requested(Message):
        command: str  # "stop", "pause" or "checkpoint"

    def compose(self) -> ComposeResult:
        for command, label in (("stop", "Stop"), ("pause", "Pause"), ("checkpoint", "Checkpoint")):
            button = Button(label, id=f"button-{command}", compact=True, classes=f"control-{command}")
            button.can_focus = False  # keys drive the app; buttons are for the mouse
            yield button

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        command = (event.button.id or "").removeprefix("button-")
        self.post_message(self.Requested(command))

    def set_paused(self, paused: bool) -> None:
        self.query_one("#button-pause", Button).label = "Resume" if paused else "Pause"

    def set_enabled(self, enabled: bool) -> None:
        for button in self.query(Button):
            button.disabled = not enabled
        self.display = enabled  # nothing to steer: no buttons that would do nothing
