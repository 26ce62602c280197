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
        # the partial line at the bottom: (stream, text, style, rows written or -n deferred writes, lines)
        self.updating: tuple | None = None

    def add(self, stream: str, text: str, partial: bool = False) -> None:
        style = ""
        if stream == "stderr":
            style = self.get_component_rich_style("output-log--stderr")
        elif stream == "tuitrain":
            style = self.get_component_rich_style("output-log--tuitrain")
        bar, self.updating = self.updating, None
        if bar is not None:
            self._take_back(bar)  # the line it showed is redrawn, has ended, or moves below this one
        if bar is not None and bar[0] != stream:
            if partial:  # a bar on another stream: the older one stays as it stood
                self._write(*bar[:3])
            else:  # another stream's line goes above the bar, which stays at the bottom (as tqdm.write)
                self._write(stream, text, style)
                self.updating = self._write(*bar[:3])
                return
        written = self._write(stream, text, style)
        if partial:
            self.updating = written

    def _write(self, stream: str, text: str, style) -> tuple:
        size_known = self._size_known
        before, deferred = len(self.lines), len(self._deferred_renders)
        lines = safe_text(text, colour=True).split("\n")
        for line in lines:
            self.write(Text.from_ansi(line, style=style), scroll_end=None)
            self.count += 1
        rows = len(self.lines) - before if size_known else deferred - len(self._deferred_renders)
        return stream, text, style, rows, len(lines)

    def _take_back(self, bar: tuple) -> None:
        rows = bar[3]
        self.count -= bar[4]
        if rows < 0:  # written before the first layout: RichLog still holds them back
            if not self._size_known and len(self._deferred_renders) >= -rows:
                del self._deferred_renders[rows:]
            return
        if 0 < rows <= len(self.lines):
            del self.lines[-rows:]
            self._line_cache.clear()  # its keys are row numbers: the rows written next take the same ones
            self.refresh()
