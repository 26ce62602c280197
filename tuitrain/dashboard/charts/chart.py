"""`Chart`: what every chart of the grid is, whatever it draws (kinds.py registers the kinds: a metric's
lines, a histogram's heatmap, ...). It holds what the grid and the keys work with: the chart's name and
the metrics it shows (the filter matches them), its reading tools (`l` log, `s` smoothing, `x` x axis,
`w` window: a kind may leave one out), the inspect cursor (`i`: the step under it and each drawn
series' value there, in a line above the canvas) and the figure, built on the UI thread only when
its data, size or colours changed.

A kind's widget subclasses it and says what it reads and draws: `show(state)` takes its points from
the state (into `points`, `steps`, `origin`), `lines()` gives the series the inspect readout reads,
`_draw(width, height)` the figure (`draw_chart`, drawing.py), `_set_subtitle()` the bottom border.

Colours come from the theme's CSS: the widget's own background/color for canvas and axes, the
component classes for the series (named `metric-plot--*` as when every chart was a `MetricPlot`, so a
theme's colours keep applying).
"""

from __future__ import annotations

import bisect
import math
import time
from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text
from textual import events
from textual.strip import Strip
from textual.widget import Widget

from tuitrain.core.text import NAME_WIDTH
from tuitrain.dashboard.charts.drawing import Drawn, Line, Palette, blend, hex_of, rgb_of
from tuitrain.dashboard.charts.plan import SMOOTHING, short

if TYPE_CHECKING:
    from tuitrain.dashboard.state.model import DashboardState

AXIS_NAMES = {"step": "step", "epoch": "epoch", "time": "wall time", "samples": "samples"}


class Chart(Widget, can_focus=True):
    """A chart named `chart` of `metrics` (one name, or a group that shares a chart)."""

    COMPONENT_CLASSES = {"metric-plot--train", "metric-plot--valid", "metric-plot--epoch"}

    DEFAULT_CSS = """
    Chart { width: 1fr; height: 1fr; min-height: 6; }
    Chart.-maximized { height: 1fr; }
    Chart > .metric-plot--train { color: #3c9be8; }
    Chart > .metric-plot--valid { color: #f0a030; }
    Chart > .metric-plot--epoch { color: #555555; }
    """

    def __init__(
        self, chart: str = "", metrics: list[str] | None = None, *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.chart = chart
        self.metrics: list[str] = list(metrics) if metrics else ([chart] if chart else [])
        # the reading tools, this chart's own
        self.log_scale = False
        self.smoothing = 0.0
        self.x_axis = "step"
        self.window = "full"
        # what the last show() computed (tests read these)
        self.points: dict[str, tuple[list[float], list[float]]] = {}  # raw, by split ("valid/d_loss" in groups)
        self.smoothed: dict[str, tuple[list[float], list[float]]] = {}
        self.steps: dict[str, list[float]] = {}  # each raw series' global steps, beside its x values
        self.origin: dict[str, tuple] = {}  # each raw series' (run or None, split, metric)
        self.cursor: float | None = None  # inspecting: the x the cursor stands at (None: off)
        self.readout_text = ""  # what the inspect line says (tests read it)
        self.drawn = Drawn([])
        self.boundaries: list[float] = []
        self.alert_marks: list[float] = []  # x of the health alerts shown on this chart
        self.skipped = 0  # points left out: not finite, or <= 0 on a log scale
        self.title_text = ""
        self._name_width = NAME_WIDTH
        self._state: DashboardState | None = None
        self.pending: DashboardState | None = None  # to show once mounted
        self._version = 0  # bumped by each show(): frame() rebuilds the figure only then
        self._widths: tuple[int, int] | None = None  # (width, outer width) as the last show() read them
        self._rendered: tuple | None = None
        self._lines: list[Strip] = []  # the frame of the render pass under way
        self.builds = 0  # figures built, for tests
        self.build_cost = 0.0  # CPU seconds the last figure took to build

    @property
    def metric(self) -> str:
        return self.metrics[0] if self.metrics else ""

    def _series_color(self, part: str) -> tuple[int, int, int]:
        style = self.get_component_rich_style(f"metric-plot--{part}")
        if style.color is None:
            return (200, 200, 200)
        return tuple(style.color.get_truecolor())  # type: ignore[return-value]

    # --- what a kind says ---------------------------------------------------------------------

    def show(self, state: DashboardState) -> None:
        """Take the points from the state (at most a few times a second), then `_replotted()`."""
        raise NotImplementedError

    def lines(self) -> list[Line]:
        """The series as drawn and read by the inspect cursor."""
        raise NotImplementedError

    def _draw(self, width: int, height: int) -> Drawn:
        raise NotImplementedError

    def _set_subtitle(self) -> None:
        self.border_subtitle = "inspect ←/→" if self.cursor is not None else ""

    def _replotted(self) -> None:
        self._widths = (self.size.width, self.outer_size.width)
        if self.cursor is not None:
            self.cursor = self._snap(self.cursor)
        self._version += 1
        self.refresh()

    # --- the reading tools (the chart keys) ----------------------------------------------------

    def toggle_log(self) -> None:
        self.log_scale = not self.log_scale

    def cycle_smoothing(self) -> None:
        i = SMOOTHING.index(self.smoothing) if self.smoothing in SMOOTHING else 0
        self.smoothing = SMOOTHING[(i + 1) % len(SMOOTHING)]

    def cycle_x_axis(self, available: list[str]) -> None:
        i = available.index(self.x_axis) if self.x_axis in available else 0
        self.x_axis = available[(i + 1) % len(available)]

    def toggle_window(self) -> None:
        self.window = "recent" if self.window == "full" else "full"

    # --- inspect: a cursor at a step, and every series' value there --------------------------

    @property
    def inspecting(self) -> bool:
        return self.cursor is not None

    def _xs(self) -> list[float]:
        """Every logged x of the chart's raw series, in order: where the cursor can stand."""
        return sorted({x for xs, _ in self.points.values() for x in xs})

    def _snap(self, x: float) -> float | None:
        """The logged x at or before x (the first one when none is before)."""
        xs = self._xs()
        if not xs:
            return x
        i = bisect.bisect_right(xs, x) - 1
        return xs[max(i, 0)]

    def inspect(self, x: float | None = None) -> None:
        """Cursor on, at x (snapped to a logged point at or before it), else at the newest point."""
        xs = self._xs()
        self.cursor = self._snap(x) if x is not None else (xs[-1] if xs else 0.0)
        self._moved()

    def stop_inspecting(self) -> None:
        self.cursor = None
        self._moved()

    def _column(self, x: float) -> int:
        axis = self.drawn.x
        return axis.cell(x) if axis is not None else 0

    def move_cursor(self, delta: int) -> None:
        """One column right (delta 1) or left (-1), to the newest logged point in that column: each
        press moves the line on screen, and the cursor always stands on a real point."""
        if self.cursor is None:
            return
        xs = self._xs()
        if not xs:
            return
        if self.drawn.x is None:  # not drawn yet: point by point
            i = bisect.bisect_left(xs, self.cursor)
            self.cursor = xs[min(max(i + delta, 0), len(xs) - 1)]
        else:
            here = self._column(self.cursor)
            if delta > 0:
                right = [x for x in xs if self._column(x) > here]
                if right:
                    target = self._column(right[0])
                    self.cursor = max(x for x in right if self._column(x) == target)
            else:
                left = [x for x in xs if self._column(x) < here]
                if left:
                    self.cursor = left[-1]
        self._moved()

    def cursor_to_column(self, column: int) -> None:
        """The cursor at the canvas's column (a click): the newest logged point at or before it."""
        xs = self._xs()
        if not xs or self.drawn.x is None:
            return
        at = [x for x in xs if self._column(x) <= column]
        self.cursor = at[-1] if at else xs[0]
        self._moved()

    def _moved(self) -> None:
        self._set_subtitle()
        self._version += 1
        self.refresh()

    def readout(self) -> tuple[float | None, list[tuple[Line, float | None]]]:
        """(the step under the cursor, [(series, its value at or before the cursor)]), None: no value."""
        lines = self.lines()
        step = None
        values: list[tuple[Line, float | None]] = []
        for line in lines:
            i = line.at(self.cursor) if self.cursor is not None else -1
            values.append((line, line.ys[i] if i >= 0 else None))
            if step is None and i >= 0 and line.xs[i] == self.cursor and line.steps is not None:
                step = line.steps[i]
        if step is not None:
            values = [(line, self._exact(line, step, value)) for line, value in values]
        return step, values

    def _exact(self, line: Line, step: float, shown: float | None) -> float | None:
        """A series' value at the newest step at or before `step` as the run's files hold it: a long
        run's chart keeps each bucket's extremes only, so its nearest stored point may be steps away.
        The chart's own point where it is as new (a live run's newest, not yet in the files), or where
        the files cannot tell (a series without an `origin`: one the chart computed)."""
        origin, value_at = self.origin.get(line.key), (self._state.value_at if self._state is not None else None)
        if origin is None or value_at is None:
            return shown
        run, split, name = origin
        found = value_at(split, name, step, run)
        if found is None:
            return shown
        i = line.at(self.cursor) if self.cursor is not None else -1
        own = line.steps[i] if i >= 0 and line.steps is not None else -math.inf
        return found[1] if found[0] >= own else shown

    def _readout(self, lines: list[Line], width: int) -> list[Text]:
        """The inspect line(s) above the canvas: the step (and the x, on another x axis), then each
        series' glyph, name and value in its colour; shorter forms when the width is short."""
        step, values = self.readout()
        fg = self.palette().foreground
        at = self.cursor if self.cursor is not None else 0.0  # drawn only while inspecting
        where = f"step {step:,.0f}" if step is not None else f"{AXIS_NAMES[self.x_axis]} {short(at)}"
        if step is not None and self.x_axis != "step":
            where += f" · {AXIS_NAMES[self.x_axis]} {short(at, 4)}"
        out: list[Text] = []
        for named, digits in ((True, 4), (False, 4), (False, 3)):  # then the glyph alone names a series
            head = Text("▏" + where, style=Style(color=hex_of(fg), bold=True))
            out = [head]
            for line, value in values:
                name = line.label if named else line.short
                part = Text(line.glyph + (" " if name else "") + name, style=Style(color=hex_of(line.color)))
                part.append(" " + (short(value, digits) if value is not None else "-"), style=Style(color=hex_of(fg)))
                if out[-1].cell_len + 2 + part.cell_len > width:
                    out.append(Text(" "))
                else:
                    out[-1].append("  ")
                out[-1].append_text(part)
            if len(out) == 1:
                break
        self.readout_text = " ".join(t.plain.strip() for t in out)
        return out[:3]

    def on_click(self, event: events.Click) -> None:
        if self.cursor is None:
            return
        offset = event.get_content_offset(self)
        if offset is not None and self.drawn.x is not None:
            self.cursor_to_column(offset.x - self.drawn.left)

    # --- drawing -------------------------------------------------------------------------

    def palette(self) -> Palette:
        _, _, bg, fg = self.colors
        background, foreground = rgb_of(bg), rgb_of(fg)
        return Palette(
            background, foreground, blend(foreground, background, 0.22), self._series_color("epoch"), foreground
        )

    def frame(self) -> list[Strip]:
        """The figure's lines, top first, each the widget's width. Textual re-renders on layout
        passes triggered by other panels; building a figure is the dashboard's costliest work, so
        it happens only for new data, a new size or colours."""
        width, height = self.content_size
        key = (self._version, self.content_size, self.app.theme, self.colors)
        if self._rendered is None or self._rendered[0] != key:
            t0 = time.thread_time()
            style = self.rich_style
            lines: list[Strip] = []
            if width >= 1 and height >= 1:
                self.drawn = self._draw(width, height)
                lines = [line.crop_extend(0, width, style) for line in self.drawn.lines[:height]]
            lines += [Strip.blank(width, style)] * (height - len(lines))
            self._rendered = (key, lines)
            self.build_cost = time.thread_time() - t0
            self.builds += 1
        return self._rendered[1]

    def render_lines(self, crop):
        self._lines = self.frame()  # once per pass: the key's colours are looked up through the DOM
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        lines = self._lines
        return lines[y] if y < len(lines) else Strip.blank(self.content_size.width, self.rich_style)

    def on_mount(self) -> None:
        if self.pending is not None:
            state, self.pending = self.pending, None
            self.show(state)
            if isinstance(self.parent, Widget) and hasattr(self.parent, "fit_grid"):
                self.parent.fit_grid()

    def on_resize(self) -> None:
        # the title's words and the epoch lines follow the width: shown again where it changed since they were
        # read. A new height alone is the same figure drawn at it (frame() builds for each size): the grid
        # shares its height among its rows in a second layout pass, and each pass built every chart again
        if self._state is not None and self._widths != (self.size.width, self.outer_size.width):
            self.show(self._state)
        self.refresh()


__all__ = ["AXIS_NAMES", "Chart"]
