"""`HelpScreen`: the key list (`?`); any key closes it. On a small terminal (80x24) in fewer words, so
the whole list is on the screen."""

from __future__ import annotations

from io import StringIO
from typing import Any

from rich.console import Console
from rich.table import Table
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from tuitrain.dashboard.layout import COMPACT
from tuitrain.dashboard.screens.modal import Modal

#: (key, what it does, the same in fewer words for a small terminal)
KEYS = [
    ("Tab / Shift+Tab, arrows", "move the focus between charts (a click too)", "focus the next / previous chart"),
    (
        "PgDn / PgUp",
        "the next / previous screenful of charts, when they do not all fit",
        "the charts below / above the screen",
    ),
    (
        "Enter",
        "the focused chart alone, full size; Enter or Esc back to the grid",
        "the focused chart alone; Enter or Esc: back",
    ),
    (
        "l",
        "log scale on the focused chart (values <= 0 are left out); again: linear",
        "log scale on the focused chart; again: linear",
    ),
    (
        "s",
        "smoothing of the training series: EMA 0.6, 0.9, 0.99, off (the raw series stays, faint)",
        "smoothing: EMA 0.6, 0.9, 0.99, off",
    ),
    ("x", "x axis: step, epoch, wall time, samples seen (those the run has)", "x axis: step, epoch, time, samples"),
    ("w", "window: full history, then the most recent steps only", "window: full history, recent steps"),
    (
        "/",
        "only the charts whose names match a regular expression (empty: all; hidden ones too: /device, /band)",
        "only the charts matching a regex (empty: all; /device, /band)",
    ),
    (
        "[ / ]",
        "samples: each name's image or text a logged step older / newer; with the panel focused (Tab)"
        " ←/→ too, Enter: it alone",
        "samples: a logged step older / newer",
    ),
    (
        "i",
        "inspect: a cursor on the focused chart (←/→ or a click move it) with the step and every"
        " series' value there; i or Esc: off",
        "a cursor (←/→) and the values under it",
    ),
    (
        "e",
        "export: the screen as SVG and every series as CSV, in RUN_DIR/exports/",
        "export the screen and series: RUN_DIR/exports/",
    ),
    (
        "d",
        "comparing runs (tuitrain watch A B): the config keys whose values differ between the runs shown",
        "comparing runs: the config keys that differ",
    ),
    (
        "R",
        "comparing runs: the run list takes the keys: space show/hide, p pin, o only this, a all, / filter by"
        " name or config value (optimizer.lr=1e-3), v sort, Esc or R back",
        "comparing runs: the run list takes the keys",
    ),
    (
        "P",
        "a sweep: the parameters view: each trial's best value against each searched parameter, and the"
        " trials as parallel coordinates, the best marked ★; P or Esc back",
        "a sweep: the metric against each parameter",
    ),
    ("c", "write a checkpoint now", "write a checkpoint now"),
    ("p", "pause training; p again resumes", "pause training; p again resumes"),
    (
        "q",
        "stop training and leave (asks y / any other key cancels); once training has ended, leave",
        "stop training and leave (asks); ended: leave",
    ),
    (
        "Ctrl+C",
        "stop gracefully at once, without asking; a second Ctrl+C ends training now (its checkpoints"
        " stay) and the process",
        "stop now, gracefully; twice: end the process",
    ),
    (
        "Ctrl+Z",
        "suspend the process, training with it, as any terminal job; fg brings the screen back",
        "suspend (training too); fg: back",
    ),
    ("r", "the summary or error again, once training has ended", "the summary again, once ended"),
    ("?", "this list", "this list"),
]
#: the keys of comparing runs, listed only when comparing
COMPARING_KEYS = ("d", "R", "P", "d / P")
#: the samples' keys, listed only for a run that logged images or texts
MEDIA_KEYS = ("[ / ]",)
#: the keys in fewer rows, for a small terminal (80x24): with the marks below, all of it on the screen
BRIEF = [
    ("Tab, arrows", "focus another chart (a click too)"),
    ("PgDn / PgUp", "the charts below / above the screen"),
    ("Enter", "the focused chart alone; Enter or Esc: back"),
    ("l / s", "log scale / smoothing (EMA 0.6, 0.9, 0.99, off)"),
    ("x / w", "x axis: step, epoch, time, samples / window"),
    ("/", "only charts matching a regex (empty: all; /device, /band)"),
    ("[ / ]", "samples: a logged step older / newer"),
    ("i", "a cursor (←/→) and the values under it"),
    ("e", "export the screen and series: RUN_DIR/exports/"),
    ("d / P", "comparing: the config keys that differ / a sweep's parameters"),
    ("R", "comparing: the run list takes the keys (space, p, o, a, /, v)"),
    ("c / p", "a checkpoint now / pause training (p again: resume)"),
    ("q", "stop training and leave (asks); ended: leave"),
    ("Ctrl+C / Z", "stop now, gracefully (twice: end it) / suspend (fg: back)"),
]

#: what the charts and panels draw, each mark with what it means (the legend under the keys)
MARKS = [
    ("━  •", "train: a line (smoothed: the raw one faint) · valid: a point per validation"),
    ("━1 ━2", "compared runs: each by its number and colour"),
    ("★", "the best value: in a chart's title, the best checkpoint, the run list's best run"),
    ("┊", "an epoch's end: a dozen drawn at most, so with more epochs only every k-th"),
    ("▼", "a health alert began at that step (its text is in the output panel)"),
    ("│ ┼ ─  ┃", "grid lines at the labelled ticks · ┃ the inspect cursor (i)"),
    ("██░░", "devices: CPU, Mem, GPU use as a bar (red from 90%)"),
    ("▂▅█", "after CPU's %: one block per core (or group of cores), as tall as it is busy"),
    ("⚑ ● ◆ ○", "checkpoints: ⚑ one asked for (c) · run list: ● shown, ◆ pinned, ○ hidden"),
]
#: the same in three lines, for a small terminal
MARKS_BRIEF = [
    ("━ • ★ ▼ ┃", "train line · valid point · best · alert began · cursor"),
    ("┊", "an epoch's end: a dozen at most, else every k-th epoch"),
    ("██░░ ▂█", "CPU: all cores (red from 90%), then a block per core"),
]  # ⚑ and ● ◆ ○ say what they are in their panels' own borders (checkpoints, run list)


def _rows(parts: list[tuple[str, Any]], width: int) -> int:
    """The lines `parts` take at `width` cells (the marks' title has a blank line above it)."""
    console = Console(width=max(width, 10), file=StringIO(), legacy_windows=False)
    lines = sum(
        len(console.render_lines(part, console.options.update_width(max(width, 10)), pad=False)) for _, part in parts
    )
    return lines + sum(part_id == "help-marks-title" for part_id, _ in parts)


class HelpScreen(Modal[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: 112; max-width: 95%; height: auto; max-height: 95%; padding: 0 1; }
    #help-box > Static { width: 100%; }
    #help-marks-title { text-style: bold; margin-top: 1; }
    """

    #: the lines the full help takes, by (note, comparing, media, the box's inner width): measured once (Rich
    #: renders it whole to count them, a tenth of what opening the dialog costs)
    _full_rows: dict[tuple[str, bool, bool, int], int] = {}

    def __init__(self, note: str = "", comparing: bool = False, media: bool = False) -> None:
        super().__init__()
        self.note = note
        self.comparing = comparing
        self.media = media

    def compose(self) -> ComposeResult:
        width, height = self.app.size
        # the whole of it on the screen: the full words where they fit, else (80x24, as the side panels
        # shrink) the keys in fewer rows, each on one line, and the marks in three
        parts = self._parts(small=False)
        inner = min(112, width * 95 // 100) - 4  # the box's width less its border and padding
        if width < COMPACT[0] or height < COMPACT[1] or self._rows_of(parts, inner) > height * 95 // 100 - 2:
            parts = self._parts(small=True)
        with Vertical(id="help-box"):
            for part_id, part in parts:
                yield Static(part, id=part_id)

    def _rows_of(self, parts: list[tuple[str, Any]], inner: int) -> int:
        """`_rows(parts, inner)` of the full help (`parts`), kept for the next time the dialog opens."""
        key = (self.note, self.comparing, self.media, inner)
        if key not in self._full_rows:
            self._full_rows[key] = _rows(parts, inner)
        return self._full_rows[key]

    def _parts(self, small: bool) -> list[tuple[str, Any]]:
        """(id, renderable) of each line or table, top to bottom."""
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        rows = BRIEF if small else [(key, does) for key, does, _ in KEYS]
        for key, does in rows:
            if (key in COMPARING_KEYS and not self.comparing) or (key in MEDIA_KEYS and not self.media):
                continue
            table.add_row(key, does)
        marks = Table.grid(padding=(0, 2))
        marks.add_column(style="bold", no_wrap=True, min_width=max(len(k) for k, _ in rows))
        marks.add_column(no_wrap=small, overflow="ellipsis")
        for mark, means in MARKS_BRIEF if small else MARKS:
            marks.add_row(mark, means)
        parts: list[tuple[str, Any]] = [("help-title", "Keys"), ("help-keys", table)]
        if not small:
            parts.append(("help-marks-title", "Marks: what the charts and panels draw"))
        parts.append(("help-marks", marks))
        # comparing on a small terminal: the note repeats the d / P / R rows, and there is no room for it
        if self.note and not (small and self.comparing):
            parts.append(("help-note", self.note))
        parts.append(("help-close", "any key closes this"))
        return parts

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss()

    def on_click(self) -> None:
        self.dismiss()
