"""`OutputLog`: what the user's code printed or logged, as plain text inside the screen.

Lines are written as `Text` (never parsed as markup), so any output is shown as-is and cannot
tear the layout; stderr and tuitrain's own notes are styled by the theme.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog


class OutputLog(RichLog):
    """A bounded, auto-scrolling log; `add(stream, text)` from the app's drain."""

    COMPONENT_CLASSES = {"output-log--stderr", "output-log--tuitrain"}

    DEFAULT_CSS = """
    OutputLog { height: 1fr; overflow-y: auto; overflow-x: hidden; scrollbar-size-vertical: 1; }
    OutputLog > .output-log--stderr { color: red; }
    OutputLog > .output-log--tuitrain { color: cyan; text-style: dim; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None, max_lines: int = 5000) -> None:
        super().__init__(id=id, classes=classes, max_lines=max_lines, wrap=True, markup=False,
                         highlight=False, auto_scroll=True)
        self.can_focus = False  # arrows belong to the plot; the mouse wheel still scrolls
        self.count = 0  # lines written, for tests

    def add(self, stream: str, text: str) -> None:
        style = ""
        if stream == "stderr":
            style = self.get_component_rich_style("output-log--stderr")
        elif stream == "tuitrain":
            style = self.get_component_rich_style("output-log--tuitrain")
        # carriage returns (progress bars in user code) would overwrite cells; keep the last state
        for line in text.split("\n"):
            line = line.rsplit("\r", 1)[-1].expandtabs(4)
            self.write(Text.from_ansi(line, style=style), scroll_end=None)  # colours kept, other escapes dropped
            self.count += 1
