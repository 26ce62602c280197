"""`HelpScreen`: the key list (`?`); any key closes it. On a small terminal (80x24) in fewer words, so
the whole list is on the screen."""

from __future__ import annotations

from rich.table import Table
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from tuitrain.dashboard.layout import COMPACT
from tuitrain.dashboard.widgets.modal import Modal

#: (key, what it does, the same in fewer words for a small terminal)
KEYS = [
    ("Tab / Shift+Tab, arrows", "move the focus between charts (a click too)", "focus the next / previous chart"),
    ("PgDn / PgUp", "the next / previous screenful of charts, when they do not all fit",
     "the charts below / above the screen"),
    ("Enter", "the focused chart alone, full size; Enter or Esc back to the grid",
     "the focused chart alone; Enter or Esc: back"),
    ("l", "log scale on the focused chart (values <= 0 are left out); again: linear",
     "log scale on the focused chart; again: linear"),
    ("s", "smoothing of the training series: EMA 0.6, 0.9, 0.99, off (the raw series stays, faint)",
     "smoothing: EMA 0.6, 0.9, 0.99, off"),
    ("x", "x axis: step, epoch, wall time, samples seen (those the run has)", "x axis: step, epoch, time, samples"),
    ("w", "window: full history, then the most recent steps only", "window: full history, recent steps"),
    ("/", "show only the charts whose metric names match a regular expression (empty: all)",
     "only the charts matching a regex (empty: all)"),
    ("[ / ]", "samples: each name's image or text a logged step older / newer; with the panel focused (Tab)"
              " ←/→ too, Enter: it alone",
     "samples: a logged step older / newer"),
    ("i", "inspect: a cursor on the focused chart (←/→ or a click move it) with the step and every"
          " series' value there; i or Esc: off", "a cursor (←/→) and the values under it"),
    ("e", "export: the screen as SVG and every series as CSV, in RUN_DIR/exports/",
     "export the screen and series: RUN_DIR/exports/"),
    ("d", "comparing runs (tuitrain watch A B): the config keys whose values differ between the runs shown",
     "comparing runs: the config keys that differ"),
    ("R", "comparing runs: the run list takes the keys: space show/hide, p pin, o only this, a all, / filter by"
          " name or config value (optimizer.lr=1e-3), v sort, Esc or R back",
     "comparing runs: the run list takes the keys"),
    ("P", "a sweep: the parameters view: each trial's best value against each searched parameter, and the"
          " trials as parallel coordinates, the best marked ★; P or Esc back",
     "a sweep: the metric against each parameter"),
    ("c", "write a checkpoint now", "write a checkpoint now"),
    ("p", "pause training; p again resumes", "pause training; p again resumes"),
    ("q", "stop training and leave (asks y / any other key cancels); once training has ended, leave",
     "stop training and leave (asks); ended: leave"),
    ("Ctrl+C", "stop gracefully at once, without asking; a second Ctrl+C ends the process",
     "stop now, gracefully; twice: end the process"),
    ("r", "the summary or error again, once training has ended", "the summary again, once ended"),
    ("?", "this list", "this list"),
]
#: the keys of comparing runs, listed on a small terminal only when comparing
COMPARING_KEYS = ("d", "R", "P")
#: the samples' keys, listed only for a run that logged images or texts
MEDIA_KEYS = ("[ / ]",)


class HelpScreen(Modal[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: 96; max-width: 95%; height: auto; max-height: 95%; padding: 0 1; }
    #help-box > Static { width: 100%; }
    """

    def __init__(self, note: str = "", comparing: bool = False, media: bool = False) -> None:
        super().__init__()
        self.note = note
        self.comparing = comparing
        self.media = media

    def compose(self) -> ComposeResult:
        width, height = self.app.size
        # a small terminal (80x24, as the side panels shrink): each key on one line, the whole list on screen
        small = width < COMPACT[0] or height < COMPACT[1]
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for key, does, brief in KEYS:
            if (small and key in COMPARING_KEYS and not self.comparing) or (key in MEDIA_KEYS and not self.media):
                continue
            table.add_row(key, brief if small else does)
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
