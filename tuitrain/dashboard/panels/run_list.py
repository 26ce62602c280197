"""`RunList`: the compared runs, one row each (mark, number in the run's colour, name, status,
monitored value), in the side column when several runs are watched; a sweep's trials show their
searched values, a column each, in place of the name (the state's `value_columns`). Its keys change
which runs the charts show: space or Enter shows/hides the run under the cursor, `p` pins it (shown whatever
the filter, listed first, drawn on top), `o` shows it alone, `a` shows every run, `/` filters by
name or config value, `v` sorts by the monitored value; Esc goes back to the charts.

The shown/pinned/filter state is the `CompareState`'s; the list changes it and posts `Changed`, on
which the app redraws the charts and the legend.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.fmt import format_value

SHOWN, HIDDEN, PINNED, FILTERED = "●", "○", "◆", "·"
LEGEND = f"{SHOWN} shown {PINNED} pinned {HIDDEN} hidden {FILTERED} filtered out"
LEGEND_SHORT = f"{SHOWN}shown {PINNED}pinned {HIDDEN}hidden {FILTERED}out"  # a narrow list (80x24): whole words


def legend_for(width: int) -> str:
    """The marks' legend in the bottom border of a list `width` cells wide (its corners and a cell each side
    less, as Textual draws it): the short form where the long one would be cut."""
    return LEGEND if len(LEGEND) <= width - 6 else LEGEND_SHORT


@dataclass
class RunRow:
    """One run as the list shows it (tests and the benchmark read these)."""

    name: str
    number: int
    color: tuple[int, int, int]
    status: str
    value: float | None
    best: bool  # the value is the best checkpoint's (else the latest of the monitored metric); a sweep's: best trial
    mark: str  # SHOWN, PINNED, HIDDEN or FILTERED
    values: tuple[str, ...] = ()  # a sweep's trial: its searched values, as text


class RunList(DataTable):
    """`show(state)` with a `CompareState`; the rows it shows are in `runs` (RunRow)."""

    BINDINGS = [
        Binding("space", "toggle", "Show/hide"),
        Binding("enter", "toggle", "Show/hide", show=False),
        Binding("p", "pin", "Pin"),
        Binding("o", "only", "Only this"),
        Binding("a", "all", "All"),
        Binding("slash", "filter", "Filter runs"),
        Binding("v", "sort", "Sort"),
        Binding("escape", "charts", "Charts"),
    ]

    DEFAULT_CSS = """
    RunList { height: 1fr; scrollbar-size-vertical: 1; }
    """

    @dataclass
    class Changed(Message):
        """The runs shown changed: the charts and the legend follow."""

        note: str = ""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", cell_padding=0, zebra_stripes=False)
        self.runs: list[RunRow] = []
        self.by_value = False
        self._state = None
        self._shown: tuple | None = None  # what is on screen
        self._width = 0
        self._names: list[str] = []  # the runs in the order of the rows on screen

    # --- what it shows ---------------------------------------------------------------------

    def show(self, state) -> None:
        """Take the runs from the state; cheap when nothing changed."""
        from tuitrain.dashboard.state.compare import run_color

        self._state = state
        rows = []
        for name in state.listed():
            value, best = state.monitored(name)
            mark = (
                PINNED
                if name in state.pinned
                else SHOWN
                if state.is_shown(name)
                else HIDDEN
                if name in state.hidden
                else FILTERED
            )
            number = state.number[name]
            rows.append(
                RunRow(
                    name,
                    number,
                    run_color(number - 1),
                    state.status_of(name),
                    value,
                    best,
                    mark,
                    tuple(state.values_of(name)),
                )
            )
        if self.by_value:  # pinned first still; then the best value first (the runs' direction)
            lower = state.value_lower_is_better()
            pinned = [r for r in rows if r.mark == PINNED]
            rest = sorted(
                (r for r in rows if r.mark != PINNED),
                key=lambda r: (r.value is None, (r.value if lower else -r.value) if r.value is not None else 0),
            )
            rows = pinned + rest
        self.runs = rows
        shown = sum(r.mark in (SHOWN, PINNED) for r in rows)
        flt = state.run_filter.text
        title = f"{state.noun} {shown}/{len(rows)} shown" + (f" · {flt}" if flt else "") + f" · {state.monitor_name()}"
        self.border_title = Text(safe_text(title, lines=False))
        self.border_subtitle = legend_for(self.outer_size.width) if self.has_focus else "R: the run list's keys"
        self._render_rows(state.monitor_name(), tuple(state.value_columns()))

    def on_resize(self) -> None:
        if self._state is not None and self.size.width != self._width:
            self._shown = None
            self.show(self._state)

    def on_focus(self) -> None:
        self.border_subtitle = legend_for(self.outer_size.width)

    def on_blur(self) -> None:
        self.border_subtitle = "R: the run list's keys"

    def _render_rows(self, monitor: str, heads: tuple[str, ...] = ()) -> None:
        width = self.scrollable_content_region.width or 44
        value_w = 9
        if len(monitor) > value_w - 1:  # valid/loss: "loss" (the border's subtitle names it in full when focused)
            monitor = monitor.rpartition("/")[2]
        status_w = max([len("status")] + [len(r.status) for r in self.runs]) + 1  # its head whole ("live" is shorter)
        number_w = len(str(max((r.number for r in self.runs), default=1))) + 2  # "━12 "
        room = width - (2 + number_w) - status_w - value_w
        if heads:  # a sweep: each searched value in a column of its own, in place of the name
            widths = [
                max([len(h)] + [len(r.values[i]) for r in self.runs if i < len(r.values)]) + 1
                for i, h in enumerate(heads)
            ]
            # the values give way down to 6 cells each ("5.2e-4"), then the status becomes a sign, then values again
            squeezed = _squeeze(widths, room, floor=7)
            short = squeezed is None
            if short:
                room += status_w - 2
                squeezed = _squeeze(widths, room, floor=7) or _squeeze(widths, room, floor=4) or [4] * len(widths)
            widths, name_w = squeezed, 0
        else:
            name_w = max(8, room)
            short = name_w < 14  # a narrow column (80x24): the status as one sign, the names get the room
            name_w += status_w - 2 if short else 0
        if short:
            status_w = 2
        key = (
            width,
            monitor,
            heads,
            tuple((r.name, r.number, r.status, r.value, r.best, r.mark, r.values) for r in self.runs),
        )
        if key == self._shown:
            return
        self._shown, self._width = key, width
        # the run under the cursor stays under it
        cursor = self._names[self.cursor_row] if 0 <= self.cursor_row < len(self._names) else None
        self.clear(columns=True)
        self.add_column("", width=2 + number_w, key="run")
        if heads:
            for i, (head, w) in enumerate(zip(heads, widths)):
                self.add_column(_cut(safe_name(head, 200), w - 1), width=w, key=f"value-{i}")
        else:
            self.add_column("name", width=name_w, key="name")
        self.add_column("" if short else "status", width=status_w, key="status")
        self.add_column(Text(safe_name(monitor, value_w), justify="right"), width=value_w, key="value")
        names = [r.name for r in self.runs]
        # names too long: the start they share goes
        cut = _common_head(names) if any(len(n) > name_w - 1 for n in names) else 0
        for r in self.runs:
            on = r.mark in (SHOWN, PINNED)
            color = Style(color="#%02x%02x%02x" % r.color)
            dim = Style(dim=True)
            run = Text.assemble(
                (r.mark + " ", color if on else dim), (f"━{r.number}".ljust(number_w), color if on else dim)
            )
            if heads:
                middle = [
                    Text(
                        _fit_value(safe_name(r.values[i] if i < len(r.values) else "-", 200), w - 1),
                        style="" if on else "dim",
                    )
                    for i, w in enumerate(widths)
                ]
            else:
                middle = [Text(_fit(safe_name(r.name, 200), name_w - 1, cut), style="" if on else "dim")]
            word = _STATUS_SIGN.get(r.status, r.status[:1]) if short else r.status
            status = Text(word, style=_STATUS_STYLE.get(r.status, "") + ("" if on else " dim"))
            value = Text(
                ("★" if r.best else " ") + (format_value(r.value) if r.value is not None else "-"),
                justify="right",
                style="" if on else "dim",
            )
            self.add_row(run, *middle, status, value, key=r.name)
        self._names = names
        if cursor in names:
            self.move_cursor(row=names.index(cursor), scroll=False)

    def current_run(self) -> str | None:
        """The run under the cursor."""
        return self._names[self.cursor_row] if 0 <= self.cursor_row < len(self._names) else None

    # --- its keys ----------------------------------------------------------------------------

    def _changed(self, note: str = "") -> None:
        if self._state is not None:
            self.show(self._state)
        self.post_message(self.Changed(note))

    def action_toggle(self) -> None:
        name = self.current_run()
        if name is not None and self._state is not None:
            self._changed(self._state.toggle(name))

    def action_pin(self) -> None:
        name = self.current_run()
        if name is not None and self._state is not None:
            before = [r.name for r in self.runs]
            below = before[before.index(name) + 1] if before.index(name) + 1 < len(before) else name
            self._state.pin(name)
            self._changed()
            # the run moves (the pinned are listed first); the cursor goes on to the run that was below it
            self.move_cursor(row=self._names.index(below))

    def action_only(self) -> None:
        name = self.current_run()
        if name is not None and self._state is not None:
            self._state.only(name)
            self._changed()

    def action_all(self) -> None:
        if self._state is not None:
            self._state.show_all()
            self._changed()

    def action_sort(self) -> None:
        self.by_value = not self.by_value
        if self._state is not None:
            self.show(self._state)
            self.move_cursor(row=0)

    def action_filter(self) -> None:
        from tuitrain.dashboard.state.compare import RunFilter
        from tuitrain.dashboard.screens.filter_screen import FilterScreen

        state = self._state
        if state is None:
            return

        def apply(text: str | None) -> None:
            if text is None:
                return
            state.set_run_filter(text)
            shown = [n for n in state.runs if state.is_shown(n)]
            note = f"no run matches {text.strip()}" if text.strip() and not shown else ""
            self._changed(note)

        self.app.push_screen(
            FilterScreen(
                state.run_filter.text,
                lambda text: RunFilter(text).error,
                title="Show the runs that match: a name (a regular expression) or a config "
                "value (optimizer.lr=1e-3, lr<1e-2); terms separated by spaces, all "
                "must hold; empty: every run",
                placeholder="e.g. lr=1e-3 or adam",
            ),
            apply,
        )

    def action_charts(self) -> None:
        self.post_message(self.Changed("charts"))


# the status as one sign where the column is narrow
_STATUS_SIGN = {
    "completed": "✓",
    "failed": "✗",
    "killed": "✗",
    "interrupted": "■",
    "live": "▶",
    "running": "▶",
    "paused": "‖",
    "pruned": "–",
    "log ended": "□",  # another tool's log, its writer gone
}
_STATUS_STYLE = {
    "failed": "bold red",
    "killed": "bold red",
    "interrupted": "yellow",
    "live": "bold cyan",
    "running": "bold cyan",
    "paused": "yellow",
    "pruned": "dim",
}


def _squeeze(widths: list[int], room: int, floor: int) -> list[int] | None:
    """Column widths that fit `room` cells, the widest giving way first, none below `floor` (None: they
    cannot); room to spare goes to the last."""
    widths = list(widths)
    while sum(widths) > room and max(widths) > floor:
        widths[widths.index(max(widths))] -= 1
    if sum(widths) > room:
        return None
    if widths:
        widths[-1] += room - sum(widths)
    return widths


def _cut(text: str, width: int) -> str:
    """`text` in `width` cells, its end given way to … when longer."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _fit_value(text: str, width: int) -> str:
    """A value in `width` cells: a number with fewer digits (0.000524: 5.2e-4, 5e-4), anything else cut."""
    if len(text) <= width:
        return text
    try:
        value = float(text)
    except ValueError:
        return _cut(text, width)
    for digits in (3, 2, 1):
        mantissa, _, power = f"{value:.{digits - 1}e}".partition("e")
        for form in (f"{value:.{digits}g}", f"{mantissa}e{int(power)}"):
            if len(form) <= width:
                return form
    return _cut(text, width)


def _fit(name: str, width: int, cut: int = 0) -> str:
    """A run name in `width` cells, without the start all the names share (`cut`), else keeping its
    start and its end: run folders differ at the end (…000027-lr0.01-h32, 2025…-lr0.01-h64)."""
    if cut:
        tail = name[cut:]
        return "…" + tail[max(0, len(tail) - (width - 1)) :]
    if len(name) <= width:
        return name
    head = max(1, (width - 1) // 3)
    return name[:head] + "…" + name[len(name) - (width - 1 - head) :]


def _common_head(names: list[str]) -> int:
    """How much of the start all the names share, up to a separator (runs/exp/20250101-1200..: the
    date): the list shows what tells the runs apart. 0 when it is short or there is one run."""
    if len(names) < 2:
        return 0
    head = os.path.commonprefix(names)
    cut = max(head.rfind(sep) for sep in "-_./ ") + 1
    return cut if cut >= 4 and all(len(n) > cut for n in names) else 0
