"""`Modal`: a modal screen that is dismissed once, over a dimmed copy of the screen below drawn line by line.

Keys reach a screen in bursts, as a terminal delivers them: several in one read (fast typing, key repeat,
a paste, a busy app). Textual's `Screen.dismiss` pops whatever screen is on top, so a second key queued
for a dialog before it is gone popped the screen under it: the dashboard itself, or the stack's last screen
("ScreenStackError: Can't pop screen"). A `Modal` answers once: the first dismissal pops it and calls its
callback; any later one (a key or click that reached it while it closed) does nothing.

Keys read with the one that opened a dialog (`q` `n`, `/` `loss`, typed faster than the app reads) are
the dialog's, in the order typed, as a terminal program's type-ahead is: the app holds them (`held`,
filled by `SteeredApp`) until the dialog is up and its field focused, then hands them over marked
`typed_ahead` (`is_typed_ahead`). A dialog may refuse such a key for an answer the user could not
have read before typing it (`ConfirmScreen`: `y` stops nothing unless typed once the question shows).

The screen below shows through a dialog's translucent background, tinted. Textual draws it again whole
(`BackgroundScreen`: every cell's colours blended with the tint, then Rich's line splitting) whenever any
part of the screen below changes, and once for each dialog opened: a tenth of a second of a core on a
large terminal, most of it for lines that did not change. `DimmedScreen` does the same work one line at
a time, and keeps the lines it made: a line of the screen below that it has tinted before is not tinted
again (the same steps on the same line give the same cells).
"""

from __future__ import annotations

from itertools import islice
from typing import TypeVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual import events
from textual.await_complete import AwaitComplete
from textual.color import Color
from textual.css.styles import RulesMap
from textual.renderables.background_screen import BackgroundScreen
from textual.screen import ModalScreen, Screen
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, RichVisual, Visual

R = TypeVar("R")

_NEW_LINE = Segment.line()


async def _nothing() -> None:
    return None


class _TintedLine:
    """One line of the screen below as Textual's `BackgroundScreen` renders it: tinted by `color`."""

    def __init__(self, strip: Strip, color: Color) -> None:
        self.strip, self.color = strip, color

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        return BackgroundScreen.process_segments([*self.strip, _NEW_LINE], self.color)


class DimmedScreen(Visual):
    """The screen below a dialog, tinted (Textual's `BackgroundScreen` through its `RichVisual`), its lines
    made one at a time by the same steps and kept (`lines`) for the next time the same line is drawn."""

    #: (the line's cells, the tint, the base style, the link style, the width) -> the lines it renders to
    lines: dict[tuple, list[Strip]] = {}
    MAX_LINES = 4096  # a few large screens' worth; then it starts again

    def __init__(self, widget: Screen, below: BackgroundScreen) -> None:
        self.widget, self.below = widget, below

    def render_strips(self, width: int, height: int | None, style: Style, options: RenderOptions) -> list[Strip]:
        widget = self.widget
        app = widget.app
        console = app.console
        console_options = app.console_options.update(highlight=False, width=width, height=height)
        line_options = console_options.update_width(width)
        rich_style = style.rich_style
        link_style: RichStyle | None = widget.link_style if widget.auto_links else None
        color = self.below.color
        kept = self.lines
        if len(kept) > self.MAX_LINES:
            kept.clear()
        out: list[Strip] = []
        for strip in self.below.screen._compositor.render_strips():
            key = (tuple(strip), color, rich_style, link_style, width)
            lines = kept.get(key)
            if lines is None:
                segments = console.render(widget.post_render(_TintedLine(strip, color), rich_style), line_options)
                lines = kept[key] = [
                    Strip(line)
                    for line in Segment.split_and_crop_lines(segments, width, include_new_lines=False, pad=False)
                ]
            out.extend(lines)
            if height is not None and len(out) >= height:
                break
        return list(islice(out, None, height))

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return RichVisual(self.widget, self.below).get_optimal_width(rules, container_width)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return RichVisual(self.widget, self.below).get_height(rules, width)


TYPED_AHEAD = "typed_ahead"  # the attribute `Modal.hold` sets on a key it hands over


def is_typed_ahead(event: events.Key) -> bool:
    """A key typed before the dialog it reached was opened (read with the key that opened it)."""
    return bool(getattr(event, TYPED_AHEAD, False))


class Modal(ModalScreen[R]):
    """A `ModalScreen` whose `dismiss` acts once, and only while it is the screen on top; the screen below
    it drawn by `DimmedScreen`."""

    closing = False  # dismissed: it answers nothing more
    ready = False  # up, its field focused: keys go to it as Textual sends them

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name, id, classes)
        self.held: list[events.Key] = []  # keys read before it was up, for it, in order

    def hold(self, key: events.Key, typed_ahead: bool) -> None:
        """A key read before this dialog was up (`typed_ahead`: before it was even opened): handed to
        it once it is up, after those held before it."""
        copy = events.Key(key.key, key.character)
        setattr(copy, TYPED_AHEAD, typed_ahead)
        self.held.append(copy)
        if self.ready:
            self._hand_over()

    def on_screen_resume(self) -> None:
        # after Textual's own resume, which focuses the field (AUTO_FOCUS): the keys held go to it
        if not self.ready:
            self.call_after_refresh(self._hand_over)

    def _hand_over(self) -> None:
        self.ready = True
        held, self.held = self.held, []
        if self.closing:  # dismissed before it was up (Ctrl+C): what was typed for it goes with it
            return
        for key in held:  # the app reads them again, now for this screen: bindings, its field
            self.app.post_message(key)

    def dismiss(self, result: R | None = None) -> AwaitComplete:
        if self.closing or not self.is_current:
            return AwaitComplete(_nothing())
        self.closing = True
        return super().dismiss(result)

    def render(self):  # noqa: ANN201 (Textual's: a renderable or a Visual)
        below = super().render()
        # DimmedScreen reads the compositor's lines of the screen below (Textual's `_compositor`, tested: 8.2);
        # where a Textual has none, its own BackgroundScreen draws it
        if isinstance(below, BackgroundScreen) and hasattr(below.screen, "_compositor"):
            return DimmedScreen(self, below)
        return below


__all__ = ["DimmedScreen", "Modal", "is_typed_ahead"]
