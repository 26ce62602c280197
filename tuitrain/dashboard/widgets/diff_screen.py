"""`DiffScreen`: the config keys whose values differ between the compared runs shown (`d`)."""

from __future__ import annotations

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.widgets.modal import Modal


class DiffScreen(Modal[None]):
    """One row per differing config key, one column per run (in the runs' colours)."""

    BINDINGS = [Binding("escape", "dismiss", "Back"), Binding("d", "dismiss", "Back", show=False),
                Binding("q", "dismiss", "Back", show=False)]

    DEFAULT_CSS = """
    DiffScreen { align: center middle; }
    #diff-box { width: auto; max-width: 95%; height: auto; max-height: 90%; padding: 0 1; }
    #diff-scroll { height: auto; max-height: 1fr; }
    """

    def __init__(self, names: list[str], rows: list[tuple[str, list[str]]], colors: list[tuple[int, int, int]],
                 numbers: list[int] | None = None, of: int = 0) -> None:
        super().__init__()
        self.names, self.rows, self.run_colors = names, rows, colors
        self.numbers = numbers or list(range(1, len(names) + 1))  # each run's number in the legend
        self.of = of  # how many runs are compared, when only some are shown
        self.text = "\n".join(f"{key}: " + " | ".join(values) for key, values in rows)  # for tests

    def compose(self) -> ComposeResult:
        table = Table(box=None, padding=(0, 2), show_edge=False)
        table.add_column("config key", style="bold", no_wrap=True)
        for i, name in enumerate(self.names):
            table.add_column(Text(f"━{self.numbers[i]} {safe_name(name, 32)}", style=Style(color="#%02x%02x%02x" % self.run_colors[i])),
                             overflow="fold")
        for key, values in self.rows:  # cells as Text: a config's strings are shown, never read as markup
            table.add_row(Text(safe_name(key, 60)), *(Text(safe_text(v)) for v in values))
        with Vertical(id="diff-box", classes="panel"):
            which = f"the {len(self.names)} runs shown (of {self.of})" if self.of > len(self.names) else f"{len(self.names)} runs"
            yield Static(Text(f"Config differences between {which}", style="bold"))
            with VerticalScroll(id="diff-scroll"):
                yield Static(table if self.rows else "the runs' configs are the same")
            yield Static(Text("Esc, d or q: back", style="dim"))
