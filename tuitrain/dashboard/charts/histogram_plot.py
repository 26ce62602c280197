"""`HistogramPlot`: a logged histogram (`log_histogram`, `[log] histograms`) as a chart of the grid:
steps across, the values up (the name's range, `low` to `high`), each step's distribution as shades
of the theme's train colour, its fullest row the brightest (a heatmap, as TensorBoard's
distributions). The title names it and gives the newest step's min, max and mean.

It is a `Chart` of the grid, the kind "histograms" (kinds.py: one run's histograms, after its metrics):
focused, zoomed (Enter), filtered (`/` matches its name) and inspected (`i`: the step under the cursor
with its min, mean and max) as a metric's chart is; `l` shades by log(1 + count) (the tails show), `w`
the most recent steps only; smoothing and other x axes do not apply. The axes and labels are
`draw_chart`'s, the shades `pictures.heat_columns`'.
"""

from __future__ import annotations

import numpy as np
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from tuitrain.core.text import safe_name
from tuitrain.dashboard.charts.chart import Chart
from tuitrain.dashboard.charts.drawing import Drawn, Line, blend, draw_chart, hex_of
from tuitrain.dashboard.charts.kinds import ChartKind, register
from tuitrain.dashboard.charts.plan import short
from tuitrain.dashboard.panels.pictures import heat_columns
from tuitrain.dashboard.state.model import DashboardState

RECENT = 50  # steps `w` keeps
SHADES = 24  # levels of shade


class HistogramPlot(Chart):
    """The heatmap of histogram `key` (its chart name, what `/` matches)."""

    def __init__(self, key: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(key, [key], id=id, classes=classes)
        self.columns: list = []  # what the last show() took (tests read it)
        self._shown: tuple | None = None

    def show(self, state: DashboardState) -> None:
        self._state = state
        series = state.media.histograms.get(self.chart)
        key = (series.version if series else -1, self.window, self.log_scale, self.outer_size.width)
        if key == self._shown:  # nothing new: no figure built again
            return
        self._shown = key
        columns = list(series.columns) if series else []
        if self.window == "recent":
            columns = columns[-RECENT:]
        self.columns = columns
        steps = [float(c.step) for c in columns]
        self.points = {f"train/{n}": (steps, [getattr(c, n) for c in columns]) for n in ("min", "mean", "max")}
        self.steps = {k: steps for k in self.points}
        self.smoothed, self.origin, self.boundaries, self.alert_marks = {}, {}, [], []
        self._set_title(state)
        self._set_subtitle()
        self._replotted()

    # --- the title and the reading tools ----------------------------------------------------

    def _set_title(self, state: DashboardState) -> None:
        room = max(self.outer_size.width - 6, 10) if self.size.width else 80
        last = self.columns[-1] if self.columns else None
        title = Text()
        for form in ("long", "mid", "short", "tight"):  # the first that fits
            title = Text(safe_name(self.chart, max(8, min(40, room // 2))), style="bold")
            if last is not None:
                lo, hi, mean = last.min, last.max, last.mean
                if form == "long":
                    title.append(f"  step {last.step} · min {short(lo)} · max {short(hi)} · mean {short(mean)}")
                elif form == "mid":
                    title.append(f"  {last.step}: {short(lo, 3)}…{short(hi, 3)} μ {short(mean, 3)}")
                elif form == "short":
                    title.append(f" {short(lo, 2)}…{short(hi, 2)} μ{short(mean, 2)}")
                else:
                    title.append(f" {short(lo, 2)}…{short(hi, 2)}")
            if title.cell_len <= room:
                break
        self.title_text = title.plain
        self.border_title = title

    def _set_subtitle(self) -> None:
        tools = []
        if self.log_scale:
            tools.append("log density")
        if self.window == "recent":
            tools.append("recent")
        if self.cursor is not None:
            tools.append("inspect ←/→")
        self.border_subtitle = " · ".join(tools)

    def cycle_smoothing(self) -> None:  # a distribution is not smoothed
        pass

    def cycle_x_axis(self, available: list[str]) -> None:  # steps only
        self.x_axis = "step"

    def toggle_log(self) -> None:
        super().toggle_log()
        self._shown = None

    def toggle_window(self) -> None:
        super().toggle_window()
        self._shown = None

    # --- drawing -----------------------------------------------------------------------------

    def lines(self) -> list[Line]:
        """min, mean and max: what the inspect readout gives at the cursor's step."""
        fg = self.palette().foreground
        return [
            Line(key, xs, ys, fg, " ", "", key.partition("/")[2], self.steps.get(key), key.partition("/")[2])
            for key, (xs, ys) in self.points.items()
        ]

    def _draw(self, width: int, height: int) -> Drawn:
        palette = self.palette()
        columns = self.columns
        if not columns:
            return draw_chart([], width, height, palette)
        lo = min(c.low for c in columns)
        hi = max(c.high for c in columns)
        steps = [c.step for c in columns]
        frame = [Line("range", [steps[0], steps[-1]], [lo, hi], palette.background, " ")]  # the axes' extent only
        header = self._readout(self.lines(), width) if self.cursor is not None else []
        drawn = draw_chart(frame, width, height, palette, x_kind="step", header=header)
        if drawn.x is None or drawn.y is None:
            return drawn
        left, top = drawn.left, drawn.top
        cols, rows = width - left, height - top - 2
        x, y = drawn.x, drawn.y
        # pixel rows: each cell's lower and upper half, bottom up, around the value on its row
        edges = np.array([y.lo - y.unit / 2 + k * y.unit / 2 for k in range(2 * rows + 1)])
        shades = heat_columns(columns, steps, [x.value(c) for c in range(cols)], edges, self.log_scale)
        ramp = self._ramp(palette)
        styles: dict[tuple[int, int], Style] = {}  # (upper shade, lower shade) -> its style, made once
        levels = [
            None
            if s is None
            else np.clip(np.rint(s * SHADES), 0, SHADES).astype(int) + ((s > 0) & (np.rint(s * SHADES) == 0))
            for s in shades
        ]  # any values at all: at least 1
        cursor = x.cell(self.cursor) if self.cursor is not None else None
        cursor_color = hex_of(palette.cursor)
        lines = list(drawn.lines)
        for r in range(rows):
            strip = lines[top + r]
            grid = [(seg.text[i], seg.style) for seg in strip.crop(left, left + cols) for i in range(len(seg.text))]
            upper_px, lower_px = 2 * (rows - 1 - r) + 1, 2 * (rows - 1 - r)
            cells: list[Segment] = []
            for c in range(cols):
                column = levels[c]
                if column is None:  # no data: the grid shows
                    cells.append(Segment(*grid[c]) if c < len(grid) else Segment(" "))
                    continue
                key = (int(column[upper_px]), int(column[lower_px]))
                if c == cursor:
                    cells.append(Segment("┃", Style(color=cursor_color, bgcolor=ramp[key[1]], bold=True)))
                    continue
                style = styles.get(key)
                if style is None:
                    style = styles[key] = Style(color=ramp[key[0]], bgcolor=ramp[key[1]])
                cells.append(Segment("▀", style))
            lines[top + r] = Strip.join([strip.crop(0, left), Strip(cells, cols)])
        return Drawn(lines, x, y, left, top)

    def _ramp(self, palette) -> list[Color]:
        """Shades from the background (no values) through the train colour to near the foreground."""
        bg, fg, color = palette.background, palette.foreground, self._series_color("train")
        out = [Color.from_rgb(*bg)]
        for i in range(1, SHADES + 1):
            t = i / SHADES
            rgb = blend(color, bg, 0.2 + 0.8 * t / 0.75) if t <= 0.75 else blend(fg, color, (t - 0.75) / 0.25 * 0.6)
            out.append(Color.from_rgb(*rgb))
        return out


def _histograms(state: DashboardState) -> list[tuple[str, list[str]]]:
    """One run's histograms (runs compared have none here)."""
    return [(key, [key]) for key in state.media.histograms] if state.kind == "run" else []


register(ChartKind("histograms", 20, _histograms, lambda name, _: HistogramPlot(name, classes="panel chart")))

__all__ = ["HistogramPlot"]
