"""`HelpScreen`: the key list (`?`); any key closes it."""

from __future__ import annotations

from rich.table import Table
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("Tab / Shift+Tab, arrows", "move the focus between charts (a click too)"),
    ("Enter", "the focused chart alone, full size; Enter or Esc back to the grid"),
    ("l", "log scale on the focused chart (values <= 0 are left out); again: linear"),
    ("s", "smoothing of the training series: EMA 0.6, 0.9, 0.99, off (the raw series stays, faint)"),
    ("x", "x axis: step, epoch, wall time, samples seen (those the run has)"),
    ("w", "window: full history, then the most recent steps only"),
    ("/", "show only the charts whose metric names match a regular expression (empty: all)"),
    ("i", "inspect: a cursor on the focused chart (←/→ or a click move it) with the step and every"
          " series' value there; i or Esc: off"),
    ("e", "export: the screen as SVG and every series as CSV, in RUN_DIR/exports/"),
    ("d", "comparing runs (tuitrain watch A B): the config keys whose values differ between the runs shown"),
    ("R", "comparing runs: the run list takes the keys: space show/hide, p pin, o only this, a all, / filter by"
          " name or config value (optimizer.lr=1e-3), v sort, Esc or R back"),
    ("c", "write a checkpoint now"),
    ("p", "pause training; p again resumes"),
    ("q", "stop training and leave (asks y / any other key cancels); once training has ended, leave"),
    ("Ctrl+C", "stop gracefully at once, without asking; a second Ctrl+C ends the process"),
    ("r", "the summary or error again, once training has ended"),
    ("?", "this list"),
]


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: 96; max-width: 95%; height: auto; max-height: 95%; padding: 0 1; }
    #help-box > Static { width: 100%; }
    """

    def __init__(self, note: str = "") -> None:
        super().__init__()
        self.note = note

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for key, does in KEYS:
            table.add_row(key, does)
        with Vertical(id="help-box"):
            yield Static("Keys", id="help-title")
            yield Static(table, id="help-keys")
            if self.note:
                yield Static(self.note, id="help-note")
            yield Static("any key closes this", id="help-close")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss()

    def on_click(self) -> None:
        self.dismiss()
