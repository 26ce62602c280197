"""`OutputLog`: what the user's code printed or logged, as plain text inside the screen.

Every line goes through `safe_text` (escape sequences and controls removed, `\r` redraws collapsed)
and is written as `Text` (never parsed as markup); colour survives only as styles made by
`Text.from_ansi`. A partial line (a progress bar redrawn with `\r`) is one entry that updates: the
next line of its stream replaces it. stderr and tuitrain's own notes are styled by the theme.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from tuitrain.core.text import safe_text


class OutputLog(RichLog):
    """A bounded, auto-scrolling log; `add(stream, text, partial)` from the app's drain."""

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
        self.updating: tuple[str, int, int] | None = None  # (stream, rows, lines) of the partial line at the bottom

    def add(self, stream: str, text: str, partial: bool = False) -> None:
        style = ""
        if stream == "stderr":
            style = self.get_component_rich_style("output-log--stderr")
        elif stream == "tuitrain":
            style = self.get_component_rich_style("output-log--tuitrain")
        if self.updating is not None and self.updating[0] == stream:
            self._drop_rows(self.updating[1])  # the line it showed is redrawn, or has ended
            self.count -= self.updating[2]
        self.updating = None
        before, lines = len(self.lines), safe_text(text, colour=True).split("\n")
        for line in lines:
            self.write(Text.from_ansi(line, style=style), scroll_end=None)
            self.count += 1
        if partial and self._size_known:  # before the first layout RichLog defers writes: nothing to replace
            self.updating = (stream, len(self.lines) - before, len(lines))

    def _drop_rows(self, rows: int) -> None:
        if rows <= 0 or rows > len(self.lines):
            return
        del self.lines[-rows:]
        self._line_cache.clear()  # its keys are row numbers: the rows written next take the same ones
        self.refresh()
