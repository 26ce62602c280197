"""`ChartGrid`: the charts of the registered kinds (kinds.py: a metric's lines, the device history, a
histogram's heatmap, ...), in a grid sized to the space it has (`charts.grid_shape`): four or more at
120x40, one at 80x24, more on large terminals; the rest scroll. It keeps the charts in step with what
each kind finds in the state, hides those the filter leaves out (as each kind says), and moves the
focus between the charts it shows. Inspecting (`i`), the cursor is on the
focused chart and follows the focus to another chart at the same x.

The chart keys are its bindings (`CHART_KEYS`): l log, s smooth, x x-axis, w window, / filter,
e export, i inspect, Enter zoom, Esc back to the grid, the arrows, Tab/Shift+Tab. They act on the
focused chart, or the first one shown; `DashboardScreen` (tuitrain/dashboard/screens/screen.py) lets them
act wherever the focus is on the dashboard. `e` asks for an export (`ChartGrid.ExportRequested`):
the app writes it, as it knows the run's directory.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widget import Widget

from tuitrain.core.text import safe_text
from tuitrain.dashboard.charts.chart import Chart
from tuitrain.dashboard.charts.kinds import ChartKey, ChartKind, chart_kinds
from tuitrain.dashboard.charts.plan import compile_filter, grid_shape
from tuitrain.dashboard.screens.filter_screen import FilterScreen
from tuitrain.dashboard.state.model import DashboardState


class ChartGrid(VerticalScroll):
    """`show(state)` after new values; `set_filter(text)` for `/`; `move(delta)` for the focus keys."""

    #: the chart keys, in the footer's order (the screen binds them too: they act wherever the focus is)
    CHART_KEYS = [
        Binding("tab", "focus_chart(1)", "Chart", show=False, priority=True),
        Binding("shift+tab", "focus_chart(-1)", "Chart", show=False, priority=True),
        Binding("right", "arrow(1)", "Chart", show=False),  # inspecting: the cursor
        Binding("left", "arrow(-1)", "Chart", show=False),
        Binding("down", "focus_row(1)", "Chart", show=False),
        Binding("up", "focus_row(-1)", "Chart", show=False),
        Binding("pagedown", "page(1)", "Page", show=False),  # the charts that do not fit: a screenful on
        Binding("pageup", "page(-1)", "Page", show=False),
        Binding("enter", "zoom", "Zoom", show=False),
        Binding("escape", "unzoom", "Grid", show=False),
        Binding("l", "chart('log')", "Log"),
        Binding("s", "chart('smoothing')", "Smooth"),
        Binding("x", "chart('x_axis')", "X axis"),
        Binding("w", "chart('window')", "Window"),
        Binding("slash", "filter", "Filter"),
        Binding("e", "export", "Export"),
        Binding("i", "inspect", "Inspect"),
    ]
    # a chart focused, ↑ ↓ scroll the grid when its charts do not all fit (the container's own keys,
    # skipped when there is nothing to scroll), then move the focus a row
    BINDINGS = [
        Binding("up", "scroll_up", "Scroll Up", show=False),
        Binding("down", "scroll_down", "Scroll Down", show=False),
    ] + CHART_KEYS

    class ExportRequested(Message):
        """`e`: the screen and every series, into the run's directory (the app's to write)."""

    @dataclass
    class ViewChanged(Message):
        """The charts shown, or those out of view above or below, changed (the screen says so)."""

        shown: int
        above: int
        below: int

    DEFAULT_CSS = """
    ChartGrid { layout: grid; grid-size: 1; grid-rows: 12; grid-gutter: 0; height: 1fr; scrollbar-size-vertical: 1; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.can_focus = False  # the charts take the focus, not their container
        #: the charts by their key (`ChartKey`: a metric's chart by its name), in the grid's order
        self.charts: dict[ChartKey, Chart] = {}
        self._kinds: dict[ChartKey, ChartKind] = {}  # each chart's kind
        self.filter_text = ""
        self._pattern = None
        self._state: DashboardState | None = None
        self.columns = 1
        self.rows_on_screen = 1
        self._shape: tuple | None = None
        #: (charts shown, out of view above, below) as last laid out and reported (`ViewChanged`)
        self.view: tuple[int, int, int] = (0, 0, 0)
        #: panels outside the grid that Tab and the arrows reach after the charts (the screen's samples)
        self.also: list[Widget] = []

    def on_mount(self) -> None:
        self.watch(self, "scroll_y", lambda: self.call_after_refresh(self.report_view), init=False)

    # --- the charts ------------------------------------------------------------------------

    def show(self, state: DashboardState) -> None:
        self._state = state
        # what each kind finds in the state, in the kinds' order: (kind, name, metrics, shown)
        wanted: dict[ChartKey, tuple[ChartKind, str, list[str], bool]] = {}
        for kind in chart_kinds():
            for name, metrics in kind.charts(state):
                shown = kind.shown(name, metrics, self._pattern)
                if shown or kind.made_hidden:
                    wanted[kind.key(name)] = (kind, name, metrics, shown)
        for key in [k for k in self.charts if k not in wanted]:  # a chart that became part of a group
            self._kinds.pop(key, None)
            self.charts.pop(key).remove()
        new: dict[ChartKey, Chart] = {}
        for key, (kind, name, metrics, shown) in wanted.items():
            chart = self.charts.get(key)
            if chart is None:
                chart = new[key] = kind.make(name, metrics)
                chart.pending = state  # shown once mounted (its colours come from CSS)
                self._kinds[key] = kind
            chart.display = shown
        if new:
            self._mount_new(new)
        for chart in self.charts.values():
            if chart.is_mounted and chart not in new.values() and chart.display:
                chart.show(state)
        self.fit_grid()
        self.call_after_refresh(self.report_view)  # once laid out: the charts out of view

    def _mount_new(self, new: dict[ChartKey, Chart]) -> None:
        """The new charts after those of their kind (in the order they came), before the next kind's."""
        rank = {kind.name: i for i, kind in enumerate(chart_kinds())}
        order = lambda key: rank[self._kinds[key].name]  # noqa: E731
        for i in sorted({order(key) for key in new}):
            mine = [chart for key, chart in new.items() if order(key) == i]
            later = next(
                (c for key, c in self.charts.items() if order(key) > i and c.is_attached and c not in new.values()),
                None,
            )
            if later is not None:
                self.mount_all(mine, before=later)
            else:
                self.mount_all(mine)
        self.charts.update(new)
        # the grid's order: by kind, the charts of a kind in the order they came
        self.charts = dict(sorted(self.charts.items(), key=lambda item: order(item[0])))

    @property
    def state(self) -> DashboardState | None:
        """The state last shown (None before the first metric)."""
        return self._state

    def replot(self, chart: Chart) -> None:
        """After a reading tool changed on one chart."""
        if self._state is not None:
            chart.show(self._state)

    def visible(self) -> list[Chart]:
        return [c for c in self.charts.values() if c.display]

    # --- the grid --------------------------------------------------------------------------

    def on_resize(self) -> None:
        self.fit_grid()
        self.call_after_refresh(self.report_view)

    def fit_grid(self) -> None:
        """Columns and row heights for the charts shown and the space there is: the rows on screen
        share its height exactly, so a chart below them is out of view whole, not a torn border."""
        width, height = self.size
        if not width or not height:
            return
        cols, rows, row_height = grid_shape(len(self.visible()), width, height)
        if row_height * rows <= height:  # a screenful of rows, repeated for the rows below
            heights = [height // rows + (i < height % rows) for i in range(rows)]
        else:
            heights = [row_height]
        shape = (cols, tuple(heights))
        self.rows_on_screen = rows
        if shape == self._shape:
            return  # each change of style is a layout pass
        top = self.top_row()  # the row on top stays on top: the old offset would cut a chart of new height
        self._shape = shape
        self.columns = cols
        self.styles.grid_size_columns = cols
        self.styles.grid_rows = " ".join(map(str, heights))
        if top:
            self.call_after_refresh(self.scroll_to_row, top)

    def row_top(self, row: int) -> int:
        """Where the grid puts row `row`'s top (its rows' heights repeat)."""
        heights = self._shape[1] if self._shape else (1,)
        return sum(heights[r % len(heights)] for r in range(row))

    def top_row(self) -> int:
        """The row of charts at the top of the view (the one mostly in view, when the wheel left one in part)."""
        if not self._shape or not self.scroll_offset.y:
            return 0
        heights, y, row = self._shape[1], self.scroll_offset.y, 0
        while self.row_top(row + 1) <= y + heights[row % len(heights)] // 2:
            row += 1
        return row

    def scroll_to_row(self, row: int) -> None:
        self.scroll_to(y=self.row_top(row), animate=False, force=True)
        self.call_after_refresh(self.report_view)

    def out_of_view(self) -> tuple[int, int]:
        """(charts shown wholly above the view, wholly below it): those Tab and PgUp/PgDn reach. The rows
        fill the view exactly, so a chart is in it or out of it whole (the wheel may leave one in part)."""
        top = self.scroll_offset.y
        bottom = top + self.scrollable_content_region.height
        above = below = 0
        heights = self._shape[1] if self._shape else ()
        y = 0
        for i, chart in enumerate(self.visible()):
            if heights:  # where the grid puts it (a chart shown again by the filter is not laid out yet)
                row = i // self.columns
                y = sum(heights[r % len(heights)] for r in range(row))
                y_end = y + heights[row % len(heights)]
            else:
                y, y_end = chart.virtual_region.y, chart.virtual_region.bottom
            if y_end <= top:
                above += 1
            elif y >= bottom:
                below += 1
        return above, below

    def report_view(self) -> None:
        """`ViewChanged` when the charts shown or out of view changed."""
        if not self.is_attached:
            return
        view = (len(self.visible()), *self.out_of_view())
        if view != self.view:
            self.view = view
            self.post_message(self.ViewChanged(*view))

    # --- the filter and the focus ----------------------------------------------------------

    def set_filter(self, text: str) -> str:
        """Show only the charts whose metric names match the regular expression `text` (empty: all).
        Returns an error message for a bad expression, and then changes nothing."""
        pattern, error = compile_filter(text)
        if error:
            return error
        self.filter_text, self._pattern = text.strip(), pattern
        if self._state is not None:
            self.show(self._state)
        return ""

    def current(self) -> Chart | None:
        """The chart the keys act on: the focused one, else the first shown."""
        focused = self.app.focused
        shown = self.visible()
        if isinstance(focused, Chart) and focused in shown:
            return focused
        return shown[0] if shown else None

    def move(self, delta: int, wrap: bool = True) -> Widget | None:
        """The focus `delta` charts on (Tab, arrows), then to the panels of `also` shown (the samples)."""
        charts = self.visible()
        shown = charts + [w for w in self.also if w.display]
        if not shown:
            return None
        focused = self.app.focused
        i = shown.index(focused) if focused in shown else -1 if delta > 0 else 0
        j = i + delta
        if wrap:
            j %= len(shown)
        elif not 0 <= j < len(shown):
            # below the last row of charts: the panel under them; else stay
            j = (
                len(charts)
                if j >= len(shown) and len(shown) > len(charts) and 0 <= i < len(charts)
                else (i if i >= 0 else 0)
            )
        shown[j].focus()
        return shown[j]

    # --- inspect ----------------------------------------------------------------------------

    def inspected(self) -> Chart | None:
        """The chart that shows the cursor, if any."""
        return next((c for c in self.charts.values() if c.inspecting), None)

    def toggle_inspect(self) -> Chart | None:
        """`i`: the cursor on the focused chart, or off."""
        chart = self.inspected()
        if chart is not None:
            chart.stop_inspecting()
            return None
        chart = self.current()
        if chart is not None:
            chart.focus()
            chart.inspect()
        return chart

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """The cursor moves with the focus, to the same x when the charts share their x axis."""
        old, new = self.inspected(), event.widget
        if old is None or old is new or not isinstance(new, Chart):
            return
        x = old.cursor if old.x_axis == new.x_axis else None
        old.stop_inspecting()
        new.inspect(x)

    # --- the chart keys ---------------------------------------------------------------------

    async def press(self, key: str) -> None:
        """A chart key pressed with the focus outside the grid (`DashboardScreen`'s keys), or on a screen
        over the dashboard (the summary): its action, here."""
        binding = next((b for b in self.CHART_KEYS if b.key == key), None)
        if binding is not None:
            await self.app.run_action(binding.action, self)

    def action_focus_chart(self, delta: int) -> None:
        """Tab, Shift+Tab: the next or previous chart (not while one is shown alone)."""
        if self.screen.maximized is None:
            self.move(delta)

    def action_arrow(self, delta: int) -> None:
        """← →: the inspect cursor when there is one, else the focus."""
        chart = self.inspected()
        if chart is not None:
            chart.move_cursor(delta)
        elif self.screen.maximized is None:
            self.move(delta)

    def action_focus_row(self, delta: int) -> None:
        """↑ ↓: the chart above or below."""
        if self.screen.maximized is None:
            self.move(delta * self.columns, wrap=False)

    def action_page(self, delta: int) -> None:
        """PgDn, PgUp: the next or previous screenful of charts, its first chart focused."""
        shown = self.visible()
        if self.screen.maximized is not None or not shown or self.out_of_view() == (0, 0):
            return
        focused = self.app.focused
        if focused in shown:
            at = shown.index(focused)
        else:  # nothing focused: from the first chart in view
            top = self.scroll_offset.y
            at = next((i for i, c in enumerate(shown) if c.virtual_region.y >= top), 0)
        at -= at % self.columns
        target = shown[max(0, min(at + delta * self.columns * self.rows_on_screen, len(shown) - 1))]
        self.scroll_to_widget(target, top=True, animate=False)
        target.focus(scroll_visible=False)

    def action_inspect(self) -> None:
        """i: a cursor on the focused chart showing the step and every series' value there; i again: off."""
        self.toggle_inspect()

    def action_zoom(self) -> None:
        """Enter: the focused chart alone, full size; Enter again: back to the grid."""
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        chart = self.current()
        if chart is not None:
            chart.focus()
            screen.maximize(chart, container=False)

    def action_unzoom(self) -> None:
        """Esc: the inspect cursor off, else back to the grid."""
        chart = self.inspected()
        if chart is not None:
            chart.stop_inspecting()
        elif self.screen.maximized is not None:
            self.screen.minimize()

    def action_chart(self, tool: str) -> None:
        """l, s, x, w: a reading tool of the focused chart (the first one when none has the focus)."""
        chart = self.current()
        if chart is None:
            return
        if tool == "log":
            chart.toggle_log()
        elif tool == "smoothing":
            chart.cycle_smoothing()
        elif tool == "x_axis":
            chart.cycle_x_axis(self._state.x_axes() if self._state is not None else [])
        elif tool == "window":
            chart.toggle_window()
        self.replot(chart)

    def action_filter(self) -> None:
        """/: a regular expression on the charts' metric names (empty: every chart)."""

        def apply(text: str | None) -> None:
            if text is None:
                return
            self.set_filter(text)
            if text.strip() and not self.visible():
                self.notify(
                    safe_text(f"no chart matches /{text.strip()}/"), severity="warning", timeout=4, markup=False
                )

        self.app.push_screen(FilterScreen(self.filter_text, lambda text: compile_filter(text)[1]), apply)

    def action_export(self) -> None:
        """e: the screen and every series exported (see `ExportRequested`)."""
        self.post_message(self.ExportRequested())

    def build_cost(self) -> float:
        """CPU seconds the charts' last figures took to build, all together (the pace of replots)."""
        return sum(c.build_cost for c in self.charts.values() if c.display)
