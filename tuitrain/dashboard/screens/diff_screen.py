"""`DiffScreen`: the config keys whose values differ between the compared runs shown (`d`)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.screens.modal import Modal


class DiffScreen(Modal[None]):
    """One row per differing config key, one column per run (in the runs' colours)."""

    BINDINGS = [
        Binding("escape", "dismiss", "Back"),
        Binding("d", "dismiss", "Back", show=False),
        Binding("q", "dismiss", "Back", show=False),
    ]

    DEFAULT_CSS = """
    DiffScreen { align: center middle; }
    #diff-box { width: auto; max-width: 95%; height: auto; max-height: 90%; padding: 0 1; }
    #diff-scroll { height: auto; max-height: 1fr; }
    """

    def __init__(
        self,
        names: list[str],
        rows: list[tuple[str, list[str]]],
        colors: list[tuple[int, int, int]],
        numbers: list[int] | None = None,
        of: int = 0,
    ) -> None:
        super().__init__()
        self.names, self.rows, self.run_colors = names, rows, colors
        self.numbers = numbers or list(range(1, len(names) + 1))  # each run's number in the legend
        self.of = of  # how many runs are compared, when only some are shown
        self.text = "\n".join(f"{key}: " + " | ".join(values) for key, values in rows)  # for tests

    def compose(self) -> ComposeResult:
        heads = [f"━{n} {safe_name(name, 32)}" for n, name in zip(self.numbers, self.names)]
        styles = [Style(color="#%02x%02x%02x" % c) for c in self.run_colors]
        keys = [Text(safe_name(key, 60)) for key, _ in self.rows]
        cells = [[Text(safe_text(v)) for v in values] for _, values in self.rows]
        # the runs' names in the columns' heads where they fit on one line; else the heads are the runs'
        # numbers, and a legend above names each run on a line of its own (a name is never cut in rows)
        widths = [max([cell_len(h)] + [c[i].cell_len for c in cells]) for i, h in enumerate(heads)]
        room = self.app.size.width * 95 // 100 - 5  # the box's width less its border, padding and a scrollbar's
        # each column with its padding: 2 cells on either side (rich's Table pads its edges too)
        need = sum(w + 4 for w in [max([len("config key")] + [k.cell_len for k in keys]), *widths])
        named = need <= room
        table = Table(box=None, padding=(0, 2), show_edge=False)
        table.add_column("config key", style="bold", no_wrap=True)
        for i, head in enumerate(heads):
            table.add_column(Text(head if named else f"━{self.numbers[i]}", style=styles[i]), overflow="fold")
        for key, row in zip(keys, cells):  # cells as Text: a config's strings are shown, never read as markup
            table.add_row(key, *row)
        with Vertical(id="diff-box", classes="panel"):
            which = (
                f"the {len(self.names)} runs shown (of {self.of})"
                if self.of > len(self.names)
                else f"{len(self.names)} runs"
            )
            yield Static(Text(f"Config differences between {which}", style="bold"))
            with VerticalScroll(id="diff-scroll"):
                if self.rows and not named:
                    legend = Text("\n", no_wrap=True, overflow="ellipsis").join(
                        Text(h, style=styles[i]) for i, h in enumerate(heads)
                    )
                    legend.append("\n")
                    yield Static(legend, id="diff-legend")
                yield Static(table if self.rows else "the runs' configs are the same", id="diff-table")
            yield Static(Text("Esc, d or q: back", style="dim"))
