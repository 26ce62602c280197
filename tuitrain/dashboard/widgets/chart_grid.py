"""`ChartGrid`: one `MetricPlot` per metric (or group of metrics), in a grid sized to the space it
has (`charts.grid_shape`): four or more at 120x40, one at 80x24, more on large terminals; the rest
scroll. It keeps the charts in step with the state's metric names, hides those the filter leaves
out, and moves the focus between the charts it shows. Inspecting (`i`), the cursor is on the
focused chart and follows the focus to another chart at the same x.
"""

from __future__ import annotations

from textual import events
from textual.containers import VerticalScroll

from tuitrain.dashboard.charts import compile_filter, grid_shape, group_metrics
from tuitrain.dashboard.model import DashboardState
from tuitrain.dashboard.widgets.metric_plot import MetricPlot


class ChartGrid(VerticalScroll):
    """`show(state)` after new values; `set_filter(text)` for `/`; `move(delta)` for the focus keys."""

    DEFAULT_CSS = """
    ChartGrid { layout: grid; grid-size: 1; grid-rows: 12; grid-gutter: 0; height: 1fr; scrollbar-size-vertical: 1; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.can_focus = False  # the charts take the focus, not their container
        self.charts: dict[str, MetricPlot] = {}
        self.filter_text = ""
        self._pattern = None
        self._state: DashboardState | None = None
        self.columns = 1
        self._shape: tuple | None = None

    # --- the charts ------------------------------------------------------------------------

    def show(self, state: DashboardState) -> None:
        self._state = state
        groups = group_metrics(state.metric_names)
        wanted = {name for name, _ in groups}
        for name in [n for n in self.charts if n not in wanted]:  # a chart that became part of a group
            self.charts.pop(name).remove()
        new = []
        for name, metrics in groups:
            chart = self.charts.get(name)
            if chart is None:
                chart = self.charts[name] = MetricPlot(name, metrics, classes="panel chart")
                new.append(chart)
            chart.display = self.matches(chart)
        for chart in new:
            chart.pending = state  # shown once mounted (its colours come from CSS)
        if new:
            self.mount_all(new)
        for chart in self.charts.values():
            if chart.is_mounted and chart not in new and chart.display:
                chart.show(state)
        self.fit_grid()

    def replot(self, chart: MetricPlot) -> None:
        """After a reading tool changed on one chart."""
        if self._state is not None:
            chart.show(self._state)

    def visible(self) -> list[MetricPlot]:
        return [c for c in self.charts.values() if c.display]

    # --- the grid --------------------------------------------------------------------------

    def on_resize(self) -> None:
        self.fit_grid()

    def fit_grid(self) -> None:
        """Columns and row height for the charts shown and the space there is."""
        width, height = self.size
        if not width or not height:
            return
        cols, rows, row_height = grid_shape(len(self.visible()), width, height)
        shape = (cols, row_height)
        if shape == self._shape:
            return  # each change of style is a layout pass
        self._shape = shape
        self.columns = cols
        self.styles.grid_size_columns = cols
        self.styles.grid_rows = str(row_height)

    # --- the filter and the focus ----------------------------------------------------------

    def matches(self, chart: MetricPlot) -> bool:
        """Shown under the filter; without one, every chart but the device history (`device/...`), which
        a filter that names it shows (`/cpu`, `/device`): the training metrics keep the grid."""
        if self._pattern is None:
            return not chart.chart.startswith("device/")
        return any(self._pattern.search(m) for m in chart.metrics + [chart.chart])

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

    def current(self) -> MetricPlot | None:
        """The chart the keys act on: the focused one, else the first shown."""
        focused = self.app.focused
        shown = self.visible()
        if isinstance(focused, MetricPlot) and focused in shown:
            return focused
        return shown[0] if shown else None

    def move(self, delta: int, wrap: bool = True) -> MetricPlot | None:
        shown = self.visible()
        if not shown:
            return None
        focused = self.app.focused
        i = shown.index(focused) if focused in shown else -1 if delta > 0 else 0
        j = i + delta
        if wrap:
            j %= len(shown)
        elif not 0 <= j < len(shown):
            j = i if i >= 0 else 0
        shown[j].focus()
        return shown[j]

    # --- inspect ----------------------------------------------------------------------------

    def inspected(self) -> MetricPlot | None:
        """The chart that shows the cursor, if any."""
        return next((c for c in self.charts.values() if c.inspecting), None)

    def toggle_inspect(self) -> MetricPlot | None:
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
        if old is None or old is new or not isinstance(new, MetricPlot):
            return
        x = old.cursor if old.x_axis == new.x_axis else None
        old.stop_inspecting()
        new.inspect(x)

    def build_cost(self) -> float:
        """CPU seconds the charts' last figures took to build, all together (the pace of replots)."""
        return sum(c.build_cost for c in self.charts.values() if c.display)
