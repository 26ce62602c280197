"""`SamplesPanel`: the images and texts a run logged (`log_image`, `log_text`, `[log] samples`): the
newest of each name with its step, one card a name, as many side by side as have room (Enter: the
panel alone, full size, every name). It takes no room until the run logs one.

One step slider for every name (`[` older, `]` newer; ←/→ too while the panel has the focus): each
card shows its name's newest item at or before the chosen step, and the title says which step that
is and that it is not the newest. Texts are shown as typed (`safe_text`: nothing in them is obeyed)
and wrapped; images are drawn in coloured half-blocks (pictures.py), or with the terminal's own
graphics where `graphics.probe` found them. Paths are the run directory's (`root`): a file thinned
away meanwhile is said, not an error.
"""

from __future__ import annotations

from pathlib import Path

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.panels import graphics
from tuitrain.dashboard.state.media import MediaItem, MediaState
from tuitrain.dashboard.panels.pictures import fit, halfblocks, read_image, scaled

CARD = (18, 5)  # the smallest card: columns, rows (its name's line and four of picture or text)
TEXT_CHARS = 20_000  # of a text read from its file (an event carries its first 4000 characters)


class SampleBody(Widget):
    """A card's picture or text, drawn in half-blocks or wrapped to the card's width."""

    DEFAULT_CSS = "SampleBody { height: 1fr; width: 1fr; }"

    def __init__(self) -> None:
        super().__init__()
        self.item: MediaItem | None = None
        self.root: Path | None = None
        self.message = ""
        self.shown_text = ""  # the words drawn (tests read them)
        self._cache: tuple | None = None

    def show(self, item: MediaItem | None, root: Path | None, message: str = "") -> None:
        if (item, root, message) != (self.item, self.root, self.message):
            self.item, self.root, self.message = item, root, message
            self._cache = None
            self.refresh()

    def _lines(self, width: int, height: int) -> list[Strip]:
        style = self.rich_style
        item = self.item
        if item is None:
            return self._words(self.message, width, height, dim=True)
        if item.kind == "text":
            return self._words(self._text_of(item), width, height)
        pixels = read_image(self.root / item.path) if self.root is not None and item.path else None
        if pixels is None:
            why = (
                f"{item.path} is gone (older files are thinned)"
                if item.path and self.root is not None
                else "not kept: the run has no directory"
            )
            return self._words(f"image at step {item.step}: {why}", width, height, dim=True)
        h, w = pixels.shape[:2]
        tw, th = fit(w, h, width, height)
        background = tuple(style.bgcolor.get_truecolor()) if style.bgcolor else (0, 0, 0)
        strips = halfblocks(scaled(pixels, tw, th), background)
        pad = (width - tw) // 2  # centred across
        return [Strip.join([Strip.blank(pad, style), s]) for s in strips]

    def _text_of(self, item: MediaItem) -> str:
        if item.text or not item.path or self.root is None:
            return item.text
        try:
            with open(self.root / item.path, encoding="utf-8", errors="replace") as f:
                return f.read(TEXT_CHARS)
        except OSError:
            return f"({item.path} is gone: older files are thinned)"

    def _words(self, text: str, width: int, height: int, dim: bool = False) -> list[Strip]:
        console = self.app.console
        body = Text(safe_text(text), style=Style(dim=True) if dim else "")
        rows = list(body.wrap(console, max(width, 1), overflow="fold")) if text else []
        if len(rows) > height:
            more = len(rows) - height + 1
            note = f"… {more} more line{'s' if more != 1 else ''} (Enter: all)"
            rows = rows[: height - 1] + [
                Text(note if len(note) <= width else f"… +{more} lines"[:width], style=Style(dim=True, italic=True))
            ]
        self.shown_text = "\n".join(r.plain for r in rows)
        base = self.rich_style
        return [Strip(list(r.render(console)), r.cell_len).apply_style(base) for r in rows]

    def render_line(self, y: int) -> Strip:
        width, height = self.content_size
        key = (width, height, self.app.theme)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._lines(width, height))
        lines = self._cache[1]
        strip = lines[y] if y < len(lines) else Strip.blank(width, self.rich_style)
        return strip.crop_extend(0, width, self.rich_style)


class SampleCard(Vertical):
    """One name's card: its name and the step shown, then the picture or the text."""

    DEFAULT_CSS = """
    SampleCard { height: 1fr; width: 1fr; }
    SampleCard > .sample-head { height: 1; width: 1fr; }
    SampleCard > .sample-graphics { width: auto; height: 1fr; }
    """

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.head = Static(classes="sample-head")
        self.body = SampleBody()
        self.graphics: Widget | None = None  # the terminal's own image, where it has graphics
        self._graphics_of = ""

    def compose(self):
        yield self.head
        yield self.body

    def show(self, item: MediaItem | None, root: Path | None, at: int | None, first: int | None) -> None:
        head = Text(safe_name(self.key, max(8, self.size.width - 12 if self.size.width else 40)), style="bold")
        if item is not None:
            head.append(f"  step {item.step}", style="dim")
            message = ""
        else:
            head.append(f"  from step {first}" if first is not None else "", style="dim")
            message = f"nothing logged at or before step {at}"
        self.head.update(head)
        if not self._graphic(item, root):
            self.body.show(item, root, message)

    def _graphic(self, item: MediaItem | None, root: Path | None) -> bool:
        """The image with the terminal's graphics, where `graphics.probe` found them; False: half-blocks."""
        make = graphics.image_widget()
        path = (
            root / item.path
            if make is not None
            and item is not None
            and item.kind == "image"
            and item.path
            and root is not None
            and self.body.is_attached
            else None
        )
        if path is None or not path.is_file():
            if self.graphics is not None:
                self.graphics.remove()
                self.graphics, self._graphics_of = None, ""
                self.body.display = True
            return False
        if self._graphics_of != str(path):
            try:
                from PIL import Image  # textual-image's own dependency

                with Image.open(path) as img:
                    picture = img.convert("RGB")
            except Exception:  # noqa: BLE001 - a damaged file: half-blocks say so
                return False
            if self.graphics is None:
                self.graphics = make(picture, classes="sample-graphics")
                self.mount(self.graphics, before=self.body)
            else:
                self.graphics.image = picture
            self._graphics_of = str(path)
        self.body.display = False
        return True


class SamplesPanel(Widget, can_focus=True):
    """The cards of every name; `show(media, root)` after new items, `step(delta)` for `[` and `]`."""

    BINDINGS = [
        Binding("enter", "zoom", "Enlarge", show=False),
        Binding("escape", "unzoom", "Back", show=False),
        Binding("left", "step(-1)", "Older", show=False),
        Binding("right", "step(1)", "Newer", show=False),
    ]

    DEFAULT_CSS = """
    SamplesPanel { layout: grid; grid-size: 1; grid-gutter: 0 1; height: 12; }
    SamplesPanel.-maximized { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.media: MediaState | None = None
        self.root: Path | None = None
        self.at_step: int | None = None  # the slider: None follows the newest
        self.cards: dict[str, SampleCard] = {}
        self.hidden_keys: list[str] = []  # names without room (Enter shows them)
        self.title_text = ""
        self._shown: tuple | None = None

    # --- what it shows ----------------------------------------------------------------------

    def show(self, media: MediaState, root: Path | None) -> None:
        self.media, self.root = media, root
        new = [SampleCard(k) for k in media.keys() if k not in self.cards]
        for card in new:
            self.cards[card.key] = card
        if new:
            self.mount_all(new)
            self.call_after_refresh(self.redraw)
        self.redraw()

    def redraw(self) -> None:
        media = self.media
        if media is None:
            return
        self._layout()
        for key, card in self.cards.items():
            if card.display:
                items = media.items.get(key) or []
                card.show(media.at(key, self.at_step), self.root, self.at_step, items[0].step if items else None)
        self._titles()

    def _layout(self) -> None:
        """As many cards as have room at `CARD`'s size, side by side first; the rest hidden."""
        width, height = self.content_size
        n = len(self.cards)
        if not n or not width:
            return
        cols_fit = max(1, (width + 1) // (CARD[0] + 1))
        rows_fit = max(1, height // CARD[1])
        if n <= cols_fit:
            cols, rows = n, 1
        else:
            rows = min(rows_fit, -(-n // cols_fit))
            cols = min(cols_fit, -(-n // rows))
        shape = (cols, rows)
        if shape != self._shown:
            self._shown = shape
            self.styles.grid_size_columns = cols
            self.styles.grid_size_rows = rows
        for i, card in enumerate(self.cards.values()):
            card.display = i < cols * rows
        self.hidden_keys = [k for i, k in enumerate(self.cards) if i >= cols * rows]

    def _titles(self) -> None:
        media = self.media
        newest = media.newest_step() if media is not None else None
        title = Text("samples")
        if self.at_step is not None and newest is not None:
            title.append(f" · step {self.at_step} of {newest}", style="bold")
            title.append(" · ] newer")
        self.border_title = title
        self.title_text = title.plain  # tests read it
        notes = []
        if self.hidden_keys:
            notes.append(f"+{len(self.hidden_keys)} more: Enter")
        if self.at_step is not None and not self.has_class("-maximized") and self.size.width < 40:
            notes = []  # the title says it; a narrow border has no room for both
        if self.at_step is None and media is not None and len(media.steps()) > 1:
            notes.append("[ older")
        self.border_subtitle = " · ".join(notes)

    # --- the slider and the keys ------------------------------------------------------------

    def step(self, delta: int) -> None:
        """`[` (delta -1) one logged step older, `]` (1) one newer; past the newest it follows new items."""
        if self.media is None or not self.media:
            return
        at = self.media.step_before(self.at_step) if delta < 0 else self.media.step_after(self.at_step)
        self.at_step = None if at == self.media.newest_step() else at  # the newest: follow new items
        self.redraw()

    def action_step(self, delta: int) -> None:
        self.step(delta)

    def action_zoom(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
        else:
            screen.maximize(self, container=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Esc is the panel's only while it is enlarged (else the charts' own: the inspect cursor off)."""
        if action == "unzoom":
            return self.screen.maximized is self
        return True

    def action_unzoom(self) -> None:
        if self.screen.maximized is not None:
            self.screen.minimize()

    def on_resize(self) -> None:
        self.redraw()

    def _on_focus(self, event) -> None:
        super()._on_focus(event)
        self._frame()

    def _on_blur(self, event) -> None:
        super()._on_blur(event)
        self._frame()

    def _frame(self) -> None:
        """Focused or enlarged, a heavy border in its title's colour (as a focused chart's); else the theme's."""
        if self.has_focus or self.has_class("-maximized"):
            self.styles.border = ("heavy", self.styles.border_title_color)
        else:
            self.styles.border = None


__all__ = ["SampleBody", "SampleCard", "SamplesPanel"]
