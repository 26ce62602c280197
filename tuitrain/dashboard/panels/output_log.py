"""`OutputLog`: what the user's code printed or logged, as plain text inside the screen.

Every line goes through `safe_text` (escape sequences and controls removed, `\r` redraws collapsed)
and is kept as `Text` (never parsed as markup); colour survives only as styles made by
`Text.from_ansi`. The panel keeps the lines as written and wraps them at the width it has now,
again whenever that width changes (a resize, its scrollbar coming or going), so no character is
ever cropped. A partial line (a progress bar redrawn with `\r`) is one entry that updates: the next
line of its stream replaces it. stderr and tuitrain's own notes are styled by the theme.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tuitrain.core.text import safe_text


def _strip(row: Text, console) -> Strip:
    """One row of the panel, styled as `row`."""
    strip = Strip(list(row.render(console)), row.cell_len)
    if row.style and not row.spans:  # Text.render leaves out a style that no span carries
        strip = strip.apply_style(console.get_style(row.style))
    return strip


class OutputLog(ScrollView, can_focus=False):  # arrows belong to the plot; the mouse wheel still scrolls
    """A bounded, auto-scrolling log; `add(stream, text, partial)` from the app's drain."""

    COMPONENT_CLASSES = {"output-log--stderr", "output-log--tuitrain"}

    DEFAULT_CSS = """
    OutputLog {
        height: 1fr; overflow-y: auto; overflow-x: hidden; scrollbar-size-vertical: 1;
        background: $surface; color: $foreground;
    }
    OutputLog > .output-log--stderr { color: red; }
    OutputLog > .output-log--tuitrain { color: cyan; text-style: dim; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None, max_lines: int = 5000) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self.count = 0  # lines written, for tests
        self.entries: list[tuple[Text, int]] = []  # each line as written, and the rows it takes now
        self.lines: list[Strip] = []  # the entries wrapped at `wrap_width`, as the panel shows them
        self.wrap_width = 0  # 0 before the first layout: lines wait, unwrapped
        # the partial line at the bottom: (stream, text, style, entries written)
        self.updating: tuple | None = None

    def add(self, stream: str, text: str, partial: bool = False) -> None:
        style: str | Style = ""
        if stream == "stderr":
            style = self.get_component_rich_style("output-log--stderr")
        elif stream == "tuitrain":
            style = self.get_component_rich_style("output-log--tuitrain")
        bar, self.updating = self.updating, None
        if bar is not None:
            self._take_back(bar[3])  # the line it showed is redrawn, has ended, or moves below this one
        if bar is not None and bar[0] != stream:
            if partial:  # a bar on another stream: the older one stays as it stood
                self._write(*bar[:3])
            else:  # another stream's line goes above the bar, which stays at the bottom (as tqdm.write)
                self._write(stream, text, style)
                self.updating = self._write(*bar[:3])
                self._shown()
                return
        written = self._write(stream, text, style)
        if partial:
            self.updating = written
        self._shown()

    def _write(self, stream: str, text: str, style) -> tuple:
        lines = safe_text(text, colour=True).split("\n")
        for line in lines:
            line_text = Text.from_ansi(line, style=style)
            rows = self._wrap(line_text) if self.wrap_width else []
            self.entries.append((line_text, len(rows)))
            self.lines.extend(rows)
        self.count += len(lines)
        if len(self.entries) > self.max_lines:
            drop = len(self.entries) - self.max_lines
            del self.lines[: sum(rows for _, rows in self.entries[:drop])]
            del self.entries[:drop]
        return stream, text, style, len(lines)

    def _take_back(self, entries: int) -> None:
        self.count -= entries
        entries = min(entries, len(self.entries))
        if entries:
            rows = sum(rows for _, rows in self.entries[-entries:])
            del self.entries[-entries:]
            if rows:
                del self.lines[-rows:]

    def _wrap(self, text: Text) -> list[Strip]:
        """`text` in rows of at most `wrap_width` cells: words wrapped, a longer word folded."""
        console, width = self.app.console, self.wrap_width
        rows = [text] if text.cell_len <= width else text.wrap(console, width, overflow="fold")
        return [_strip(row, console) for row in rows]

    def _fit(self) -> None:
        """Wrap every line again when the width to show them in has changed."""
        width = self.scrollable_content_region.width
        if width <= 0 or width == self.wrap_width:
            return
        self.wrap_width = width
        self.lines = []
        entries = []
        for text, _ in self.entries:
            rows = self._wrap(text)
            self.lines.extend(rows)
            entries.append((text, len(rows)))
        self.entries = entries
        self._shown()

    def _shown(self) -> None:
        self.virtual_size = Size(self.wrap_width, len(self.lines))
        self.scroll_end(animate=False, immediate=False, x_axis=False)
        self.refresh()

    def on_resize(self) -> None:
        self._fit()

    def render_line(self, y: int) -> Strip:
        self._fit()  # the scrollbar may have come or gone since the last resize
        width = self.scrollable_content_region.width
        row = self.scroll_offset.y + y
        if row >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        return self.lines[row].crop_extend(0, width, self.rich_style).apply_style(self.rich_style)
