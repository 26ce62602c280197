"""`MetricPlot`: the train and valid series of one metric over global steps, with epoch boundaries.

The widget owns its plotext figure and replots from the bounded series in `DashboardState`.
Colours come from the theme's CSS: the widget's own background/color for canvas and axes, and the
component classes for the series, so a theme file restyles the plot too.
"""

from __future__ import annotations

import time

from plotext._dict import themes as _plotext_themes
from plotext._utility import colors_to_ansi
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual_plotext import PlotextPlot

from tuitrain.dashboard.model import DashboardState

RECENT_WINDOW = 200  # points shown in the recent-window view
MAX_BOUNDARIES = 12  # epoch lines drawn at most


def _rgb(color) -> tuple[int, int, int]:
    return (color.r, color.g, color.b)


def step_ticks(lo: float, hi: float, count: int = 5) -> list[int]:
    """Whole-step tick positions: steps are integers, plotext's default ticks are not."""
    lo, hi = int(lo), int(hi)
    if hi <= lo:
        return [lo]
    n = min(count, hi - lo + 1)
    return sorted({round(lo + i * (hi - lo) / (n - 1)) for i in range(n)})


def thin(xs: list[float], ys: list[float], buckets: int) -> tuple[list[float], list[float]]:
    """At most 2 points per bucket (its min and its max, in x order): drawing cost follows the
    plot's width, not the history's length, and a spike stays visible."""
    n = len(xs)
    if n <= 2 * buckets or buckets < 1:
        return xs, ys
    out_x: list[float] = []
    out_y: list[float] = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if hi <= lo:
            continue
        seg = ys[lo:hi]
        i_min = lo + min(range(len(seg)), key=seg.__getitem__)
        i_max = lo + max(range(len(seg)), key=seg.__getitem__)
        for i in sorted({i_min, i_max}):
            out_x.append(xs[i])
            out_y.append(ys[i])
    return out_x, out_y


_STYLES: dict[tuple, Style] = {}


def cell_style(fullground, style, background) -> Style:
    """The Rich style of a plotext cell's colours: the style plotext's ANSI codes decode to, found
    once per combination (a figure has a handful)."""
    key = tuple(tuple(c) if isinstance(c, list) else c for c in (fullground, style, background))
    found = _STYLES.get(key)
    if found is None:
        text = Text.from_ansi(colors_to_ansi(fullground, style, background) + "x")
        found = _STYLES[key] = Style.combine(span.style for span in text.spans)
    return found


def matrix_strips(matrix) -> list[Strip]:
    """A built plotext matrix as Textual strips, top row first: runs of cells with the same colours
    become one segment each. plotext's own output is an ANSI string that Rich would parse back and
    Textual convert again, three times the work for the same cells."""
    strips = []
    marker, fg, st, bg = matrix.marker, matrix.fullground, matrix.style, matrix.background
    for row in reversed(range(matrix.rows)):
        m, f, s, b = marker[row], fg[row], st[row], bg[row]
        segments = []
        start, cols = 0, len(m)
        for col in range(1, cols + 1):
            if col == cols or f[col] != f[start] or s[col] != s[start] or b[col] != b[start]:
                segments.append(Segment("".join(m[start:col]), cell_style(f[start], s[start], b[start])))
                start = col
        strips.append(Strip(segments, cols))
    return strips


def short_step(step: int) -> str:
    if step >= 1_000_000:
        return f"{step / 1e6:.2f}M"
    if step >= 10_000:
        return f"{step / 1e3:.1f}k"
    return str(step)


class MetricPlot(PlotextPlot):
    """Plot of `metric` ("loss", ...) in `window` "full" or "recent"."""

    COMPONENT_CLASSES = {"metric-plot--train", "metric-plot--valid", "metric-plot--epoch"}

    DEFAULT_CSS = """
    MetricPlot { width: 1fr; height: 1fr; min-height: 6; }
    MetricPlot > .metric-plot--train { color: #3c9be8; }
    MetricPlot > .metric-plot--valid { color: #f0a030; }
    MetricPlot > .metric-plot--epoch { color: #555555; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.metric = ""
        self.window = "full"
        self.points: dict[str, tuple[list[float], list[float]]] = {}  # what was plotted, for tests
        self.boundaries: list[int] = []
        self._version = 0  # bumped by each replot: frame() rebuilds the figure only then
        self._rendered: tuple | None = None
        self._lines: list[Strip] = []  # the frame of the render pass under way
        self.builds = 0  # figures built, for tests
        self.build_cost = 0.0  # CPU seconds the last figure took to build

    def _register_theme(self, app_theme_name: str) -> None:
        self._rendered = None
        self.refresh()  # the plot takes its colours from CSS, not from the app's Textual theme

    def _get_plotext_theme_name(self, app_theme_name: str) -> str:
        _, _, bg, fg = self.colors
        name = f"tuitrain-{bg.hex}-{fg.hex}"
        if name not in _plotext_themes:
            _plotext_themes[name] = [_rgb(bg), _rgb(bg), _rgb(fg), "default", [(60, 150, 230)]]
        return name

    def _series_color(self, part: str) -> tuple[int, int, int]:
        style = self.get_component_rich_style(f"metric-plot--{part}")
        if style.color is None:
            return (200, 200, 200)
        return tuple(style.color.get_truecolor())  # type: ignore[return-value]

    def show(self, state: DashboardState, metric: str, window: str) -> None:
        """Replot from the state; call at most a few times a second."""
        self.metric, self.window = metric, window
        limit = RECENT_WINDOW if window == "recent" else None
        self.points = {}
        for split in ("train", "valid"):
            series = state.metric_series(metric, split) if metric else None
            if series is not None:
                xs, ys = series.points(limit)
                # braille draws 2 dots per column: a column's min and max are all it can show, and
                # plotext's cost grows with the points (it draws each segment dot by dot)
                if self.size.width:  # unknown before the first layout: draw everything
                    xs, ys = thin(xs, ys, max(10, self.size.width))
                if xs:
                    self.points[split] = (xs, ys)
        lo = min((xs[0] for xs, _ in self.points.values()), default=None)
        if window == "recent" and "train" in self.points:
            lo = self.points["train"][0][0]
            # valid points older than the recent train window would stretch the axis
            if "valid" in self.points:
                vx, vy = self.points["valid"]
                kept = [(x, y) for x, y in zip(vx, vy) if x >= lo]
                self.points["valid"] = ([x for x, _ in kept], [y for _, y in kept])
        hi = max((xs[-1] for xs, _ in self.points.values() if xs), default=None)
        inside = [s for s in state.epoch_steps if lo is not None and hi is not None and lo < s < hi]
        every = -(-len(inside) // MAX_BOUNDARIES)  # many epochs: every k-th line, or they hide the data
        self.boundaries = inside[every - 1::every] if inside else []
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("")
        for x in self.boundaries:
            plt.vline(x, color=self._series_color("epoch"))
        if "train" in self.points and self.points["train"][0]:
            xs, ys = self.points["train"]
            plt.plot(xs, ys, marker="braille", color=self._series_color("train"), label="train")
        if "valid" in self.points and self.points["valid"][0]:
            xs, ys = self.points["valid"]
            plt.plot(xs, ys, marker="dot", color=self._series_color("valid"), label="valid")
        if not self.points:
            plt.xticks([])
            plt.yticks([])
        else:
            ticks = step_ticks(min(xs[0] for xs, _ in self.points.values() if xs),
                               max(xs[-1] for xs, _ in self.points.values() if xs))
            plt.xticks(ticks, [short_step(t) for t in ticks])
        plt.xlabel("step")
        self._version += 1
        self.refresh()

    def frame(self) -> list[Strip]:
        """The figure's lines, top first, each the widget's width. Textual re-renders on layout
        passes triggered by other panels; building a plotext figure is the dashboard's costliest
        work, so it happens only for new data, a new size or colours."""
        key = (self._version, self.size, self.app.theme, self.colors)
        if self._rendered is None or self._rendered[0] != key:
            t0 = time.thread_time()
            plot, (width, height) = self._plot, self.size
            plot.plotsize(width, height)  # as PlotextPlot.render sizes and themes the figure
            plot._set_size(width, height)
            plot.theme(self._get_plotext_theme_name(self.app.theme))
            plot._set_sizes()  # plotext's build() without its ANSI text
            plot._build_matrix()
            style = self.rich_style
            lines = [strip.crop_extend(0, width, style) for strip in matrix_strips(plot.monitor.matrix)]
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
        return lines[y] if y < len(lines) else Strip.blank(self.size.width, self.rich_style)

    def on_resize(self) -> None:
        self._rendered = None
        self.refresh()
