"""`BandPlot`, the chart kind "band": a training metric's min/max band. At each logged step, the lowest
and the highest value the metric took over the last `window` steps, drawn as two lines (the max in
the train colour, the min fainter): how far a noisy metric (a per-batch loss) swings at each point of
training, which its smoothed line hides, and whether the swing narrows as it trains. The title gives
the newest band and the window.

One band a training metric of one run; none is made until a filter names it by its chart's name
`band/<metric>` and not the metric alone: `/band` shows every band, `/band/loss` the loss's, and
`/loss` the loss's own chart, as before. Its keys: `s` the window (50, 200, 1000 or 10 steps), `w` the
recent points only, `l` a log scale, `i` inspect (the step, its min and its max); the x axis is the
step. Registered here (kinds.py), and nowhere else.
"""

from __future__ import annotations

import re
from collections import deque

from rich.text import Text

from tuitrain.core.text import safe_name
from tuitrain.dashboard.charts.chart import Chart
from tuitrain.dashboard.charts.drawing import Drawn, Line, blend, draw_chart
from tuitrain.dashboard.charts.kinds import ChartKind, register
from tuitrain.dashboard.charts.plan import finite_for, short
from tuitrain.dashboard.state.devices import DEVICE_PREFIX
from tuitrain.dashboard.state.model import DashboardState

WINDOWS = (50, 200, 1000, 10)  # steps a band spans, as `s` cycles them
PREFIX = "band/"


def rolling_band(xs: list[float], ys: list[float], window: float) -> tuple[list[float], list[float]]:
    """(lows, highs): at each point, the min and max of the values at x in (x - window, x]; `xs` in order.
    One pass, each point in and out of a monotonic queue once."""
    lows: list[float] = []
    highs: list[float] = []
    low: deque[int] = deque()  # indexes of rising values: the window's min first
    high: deque[int] = deque()  # of falling values: its max first
    start = 0
    for i, (x, y) in enumerate(zip(xs, ys)):
        while low and ys[low[-1]] >= y:
            low.pop()
        while high and ys[high[-1]] <= y:
            high.pop()
        low.append(i)
        high.append(i)
        while xs[start] <= x - window:
            start += 1
        while low[0] < start:
            low.popleft()
        while high[0] < start:
            high.popleft()
        lows.append(ys[low[0]])
        highs.append(ys[high[0]])
    return lows, highs


class BandPlot(Chart):
    """The band of training metric `metrics[0]`, named `band/<metric>`."""

    def __init__(self, chart: str, metrics: list[str], *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(chart, metrics, id=id, classes=classes)
        self.band_window = WINDOWS[0]

    def show(self, state: DashboardState) -> None:
        self._state = state
        self.points, self.steps, self.skipped = {}, {}, 0
        series = state.metric_series(self.metric, "train")
        if series is not None:
            xs, ys = series.points(series.recent_size() if self.window == "recent" else None)
            kept_x, kept_y = finite_for(xs, ys, self.log_scale)
            self.skipped = len(xs) - len(kept_x)
            pairs = sorted(zip(kept_x, kept_y), key=lambda p: p[0])
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            lows, highs = rolling_band(xs, ys, self.band_window)
            if xs:
                self.points = {"max": (xs, highs), "min": (xs, lows)}
                self.steps = {"max": xs, "min": xs}
        self._set_title()
        self._set_subtitle()
        self._replotted()

    def _set_title(self) -> None:
        room = max(self.outer_size.width - 6, 10) if self.size.width else 80
        name = safe_name(self.chart, max(8, min(40, room // 2)))
        title = Text(name, style="bold")
        if "max" in self.points:
            xs, highs = self.points["max"]
            low = self.points["min"][1][-1]
            for form in ("long", "short"):  # the first that fits
                title = Text(name, style="bold")
                if form == "long":
                    title.append(f"  step {xs[-1]:,.0f} · min {short(low)} · max {short(highs[-1])}")
                else:
                    title.append(f" {short(low, 3)}…{short(highs[-1], 3)}")
                if title.cell_len <= room:
                    break
        self.title_text = title.plain
        self.border_title = title

    def _set_subtitle(self) -> None:
        tools = [f"{self.band_window} steps"]
        if self.log_scale:
            tools.append("log")
        if self.window == "recent":
            tools.append("recent")
        if self.cursor is not None:
            tools.append("inspect ←/→")
        if self.skipped:
            tools.append(f"{self.skipped} not drawn" + (" (<= 0)" if self.log_scale else ""))
        self.border_subtitle = " · ".join(tools)

    def cycle_smoothing(self) -> None:  # `s`: the band's window, its smoothing
        self.band_window = WINDOWS[(WINDOWS.index(self.band_window) + 1) % len(WINDOWS)]

    def cycle_x_axis(self, available: list[str]) -> None:  # steps only
        self.x_axis = "step"

    def lines(self) -> list[Line]:
        """The max and the min, each read by the inspect cursor."""
        color = self._series_color("train")
        faint = blend(color, self.palette().background, 0.55)
        out = []
        for key, shade in (("max", color), ("min", faint)):
            if key in self.points:
                xs, ys = self.points[key]
                out.append(Line(key, xs, ys, shade, "braille", "━", key, self.steps[key], key))
        return out

    def _draw(self, width: int, height: int) -> Drawn:
        lines = self.lines()
        header = self._readout(lines, width) if self.cursor is not None else []
        return draw_chart(lines, width, height, self.palette(), log=self.log_scale, cursor=self.cursor, header=header)


def _bands(state: DashboardState) -> list[tuple[str, list[str]]]:
    """A band for each training metric of one run (runs compared have none)."""
    if state.kind != "run":
        return []
    names = [n for n in state.metric_names if not n.startswith(DEVICE_PREFIX)]
    return [(PREFIX + n, [n]) for n in names if state.metric_series(n, "train") is not None]


def _named(name: str, metrics: list[str], pattern: re.Pattern[str] | None) -> bool:
    """Only under a filter that names the band (`/band`, `/band/loss`), not its metric alone (`/loss`)."""
    return pattern is not None and bool(pattern.search(name)) and not any(pattern.search(m) for m in metrics)


register(
    ChartKind(
        "band",
        30,
        _bands,
        lambda name, metrics: BandPlot(name, metrics, classes="panel chart"),
        _named,
        made_hidden=False,
    )
)

__all__ = ["BandPlot", "WINDOWS", "rolling_band"]
