"""`CheckpointList`: the run's checkpoints, newest first, with the best one and those asked for (the c
key, `tuitrain checkpoint`, a stop's: never deleted by keep_last) marked, and their ages."""

from __future__ import annotations

import time
from pathlib import PurePath
from collections.abc import Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tuitrain.core.text import safe_name
from tuitrain.dashboard.fmt import format_age, format_bytes, format_value

BEST = "★"
REQUESTED = "⚑"  # asked for: kept apart from the run's own checkpoints (`[checkpoint] keep_requested`)
LEGEND = f"{REQUESTED} asked for"  # the panel's bottom border, while a row has the mark


class CheckpointList(Static):
    """`show(checkpoints, best_file, monitor)`; `clock` is injectable so ages are testable."""

    COMPONENT_CLASSES = {"checkpoint-list--header", "checkpoint-list--best"}

    DEFAULT_CSS = """
    CheckpointList { height: auto; }
    CheckpointList > .checkpoint-list--header { text-style: dim; }
    CheckpointList > .checkpoint-list--best { color: yellow; text-style: bold; }
    """

    def __init__(
        self, clock: Callable[[], float] = time.time, *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__("no checkpoint yet", id=id, classes=classes)
        self.empty = "no checkpoint yet"  # the line while there is none (a foreign log's: it has none)
        self.clock = clock
        self.rows: list[dict] = []
        self.best_file = ""
        self.monitor = ""
        self._shown: tuple | None = None  # what is on screen: (row count, text of the cells)

    def say_empty(self, line: str) -> None:
        """The line while there is no checkpoint (`empty`), shown at once when there is none."""
        self.empty, self._shown = line, None
        self.render_rows()

    def show(self, checkpoints: list[dict], best_file: str, monitor: str) -> None:
        self.rows, self.best_file, self.monitor = list(checkpoints), best_file, monitor
        self.render_rows()

    def on_resize(self) -> None:
        self._shown = None
        self.render_rows()  # the columns depend on the width

    def render_rows(self) -> None:
        """Also called every second so that ages stay true."""
        if not self.rows:
            if self._shown != (0, ()):
                self._shown = (0, ())
                self.update(self.empty)
            return
        header = self.get_component_rich_style("checkpoint-list--header")
        best = self.get_component_rich_style("checkpoint-list--best")
        value_name = safe_name(self.monitor.partition("/")[2] or self.monitor or "value", 16)
        names = ["", "ep", "step", value_name, "size", "age", "file"]
        now = self.clock()
        rows = []
        asked = any(row.get("requested") for row in self.rows)
        for row in self.rows:
            value = "-" if row.get("value") is None else format_value(row["value"])
            is_best = bool(self.best_file) and row["file"] == self.best_file
            mark = (BEST if is_best else " ") + (REQUESTED if row.get("requested") else " " if asked else "")
            rows.append(
                (
                    is_best,
                    {
                        "": mark.rstrip() or " ",
                        "ep": str(row["epoch"]),
                        "step": str(row["step"]),
                        value_name: value,
                        "size": format_bytes(row["bytes"]),
                        "age": format_age(now - row["time"]),
                        "file": safe_name(PurePath(row["file"]).name, 80),
                    },
                )
            )
        # the numbers keep their width; the file name gets what is left, or goes when too little is
        widths = {n: max([len(n)] + [len(cells[n]) for _, cells in rows]) for n in names}
        left = self.content_size.width - sum(widths[n] + 1 for n in names[:-1])
        # a file name cut short is no name: too little room beside the numbers, it gets a line of its own
        below = left < widths["file"] and self.content_size.width > 0
        columns = names if not below else names[:-1]
        shown = (
            len(rows),
            tuple(tuple(cells[c] for c in names) for _, cells in rows),
            self.best_file,
            below,
            self.content_size.width,
        )
        if shown == self._shown:
            return  # called every second for the ages: most seconds nothing on screen changes
        # a layout pass re-arranges the whole screen: only when this panel's height changes
        layout = self._shown is None or self._shown[0] != shown[0] or self._shown[3] != shown[3]
        self._shown = shown
        self.border_subtitle = LEGEND if asked else ""
        if below:
            self.update(self._two_line_rows(rows, columns, widths, header, best), layout=layout)
            return
        table = Table.grid(padding=(0, 1))
        for name in columns:
            table.add_column(
                justify="left" if name in ("", "file") else "right",
                no_wrap=True,
                overflow="ellipsis",
                min_width=widths[name],
                max_width=max(left, 8) if name == "file" else widths[name],
            )
        table.add_row(*(Text(h, style=header) for h in columns))
        for is_best, cells in rows:
            table.add_row(*(Text(cells[c], style=best if is_best else "") for c in columns))

        self.update(table, layout=layout)

    @staticmethod
    def _two_line_rows(rows, columns, widths, header, best) -> Group:
        """Each checkpoint's numbers on one line and its whole file name on the next."""

        def line(cells: dict, style) -> Text:
            return Text(
                " ".join(cells[c].ljust(widths[c]) if c == "" else cells[c].rjust(widths[c]) for c in columns),
                style=style,
                no_wrap=True,
                overflow="ellipsis",
            )

        lines = [line({c: c for c in columns}, header)]
        for is_best, cells in rows:
            lines.append(line(cells, best if is_best else ""))
            lines.append(
                Text("  " + cells["file"], style=best if is_best else header, no_wrap=True, overflow="ellipsis")
            )
        return Group(*lines)
