"""`MetricPlot`: one chart of the grid: the train and valid series of one metric (or of a few that
share a chart, `g_loss`/`d_loss`), its latest and best values in its title, and its own reading
tools: log scale, smoothing, x axis, window.

`show(state)` takes the points from the bounded series in `DashboardState` (a few thousand at most,
whatever the history's length); `frame()` thins them to the chart's width and draws them with
plotext's public module API (`plotext.plot`, `plotext.build`, ...) on the UI thread, one chart after
another. Colours come from the theme's CSS: the widget's own background/color for canvas and
axes, the component classes for the series.
"""

from __future__ import annotations

import time

import plotext
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from tuitrain.core.text import NAME_WIDTH, safe_name
from tuitrain.dashboard.charts import SMOOTHING, ema, finite_for, log_ticks, nice_ticks, short, thin, tick_labels
from tuitrain.dashboard.model import DashboardState

MAX_BOUNDARIES = 12  # epoch lines drawn at most
AXIS_NAMES = {"step": "step", "epoch": "epoch", "time": "wall time", "samples": "samples"}
EXTRA = [(80, 200, 120), (220, 110, 200), (230, 220, 90), (120, 220, 230)]  # a group's further metrics

# kept for older importers (benchmarks): the thinning now lives in tuitrain/dashboard/charts.py
__all__ = ["MetricPlot", "thin"]


def _rgb(color) -> tuple[int, int, int]:
    return (color.r, color.g, color.b)


def _blend(a: tuple[int, int, int], b: tuple[int, int, int], share: float) -> tuple[int, int, int]:
    """`share` of colour a over colour b: the faint raw series behind a smoothed one."""
    return tuple(round(x * share + y * (1 - share)) for x, y in zip(a, b))  # type: ignore[return-value]


class Line:
    """One drawn series: its points, colour, marker and legend name."""

    __slots__ = ("key", "xs", "ys", "color", "marker")

    def __init__(self, key: str, xs: list[float], ys: list[float], color: tuple[int, int, int], marker: str) -> None:
        self.key, self.xs, self.ys, self.color, self.marker = key, xs, ys, color, marker


class MetricPlot(Widget, can_focus=True):
    """A chart of `metrics` (one name, or a group that shares a chart) named `chart`."""

    COMPONENT_CLASSES = {"metric-plot--train", "metric-plot--valid", "metric-plot--epoch"}

    DEFAULT_CSS = """
    MetricPlot { width: 1fr; height: 1fr; min-height: 6; }
    MetricPlot.-maximized { height: 1fr; }
    MetricPlot > .metric-plot--train { color: #3c9be8; }
    MetricPlot > .metric-plot--valid { color: #f0a030; }
    MetricPlot > .metric-plot--epoch { color: #555555; }
    """

    def __init__(self, chart: str = "", metrics: list[str] | None = None, *, id: str | None = None,
                 classes: str | None = None) -> None:
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
        self.boundaries: list[float] = []
        self.key_colors: dict[str, tuple[int, int, int]] = {}  # compared runs: each run's colour
        self.skipped = 0  # points left out: not finite, or <= 0 on a log scale
        self.title_text = ""
        self._name_width = NAME_WIDTH
        self._state: DashboardState | None = None
        self.pending: DashboardState | None = None  # to show once mounted
        self._version = 0  # bumped by each show(): frame() rebuilds the figure only then
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

    # --- the data ---------------------------------------------------------------------------

    def show(self, state: DashboardState, metric: str | None = None, window: str | None = None) -> None:
        """Take the points from the state; call at most a few times a second."""
        self._state = state
        if metric is not None and metric not in self.metrics:
            self.chart, self.metrics = metric, [metric]
        if window is not None:
            self.window = window
        if self.x_axis != "step" and self.x_axis not in state.x_axes():
            self.x_axis = "step"
        axis = state.axes.get(self.x_axis)
        group = len(self.metrics) > 1
        self.points, self.smoothed, self.skipped = {}, {}, 0
        runs = getattr(state, "runs", None)
        if runs:  # several runs compared: each one's series, in its own colour
            self._show_runs(state, runs)
            return
        lo: float | None = None
        for name in self.metrics:
            train = state.metric_series(name, "train")
            if train is None:
                continue
            key = f"train/{name}" if group else "train"
            size = train.recent_size() if self.window == "recent" else None
            xs, ys = train.points(size)
            if size is not None and xs:
                lo = xs[0] if lo is None else min(lo, xs[0])
            self.points[key] = self._prepare(xs, ys, axis)
            if self.smoothing:
                mx, my, ns = train.means(size)
                sx, sy = ema(mx, my, ns, self.smoothing)
                self.smoothed[key] = self._prepare(sx, sy, axis, count=False)
        for name in self.metrics:
            valid = state.metric_series(name, "valid")
            if valid is None:
                continue
            xs, ys = valid.points()
            if lo is not None:  # valid points older than the recent train window would stretch the axis
                kept = [(x, y) for x, y in zip(xs, ys) if x >= lo]
                xs, ys = [p[0] for p in kept], [p[1] for p in kept]
            self.points[f"valid/{name}" if group else "valid"] = self._prepare(xs, ys, axis)
        self.points = {k: v for k, v in self.points.items() if v[0]}
        xs_all = [x for xs, _ in self.points.values() for x in (xs[0], xs[-1])]
        self.boundaries = []
        if xs_all and state.epoch_steps:
            x_lo, x_hi = min(xs_all), max(xs_all)
            steps = state.epoch_steps if lo is None else [s for s in state.epoch_steps if s >= lo]
            inside = [x for x in (axis(s) if axis else s for s in steps) if x_lo < x < x_hi]
            most = min(MAX_BOUNDARIES, max(1, (self.size.width - 10) // 6)) if self.size.width else MAX_BOUNDARIES
            every = -(-len(inside) // most)  # many epochs: every k-th line, 6 columns apart, or they hide the data
            self.boundaries = inside[every - 1::every] if inside else []
        self._set_title(state)
        self._set_subtitle()
        self._version += 1
        self.refresh()

    def _show_runs(self, state: DashboardState, runs: dict) -> None:
        from tuitrain.dashboard.compare import run_color

        self.key_colors = {}
        for i, (run, rs) in enumerate(runs.items()):
            axis = rs.axes.get(self.x_axis)
            for name in self.metrics:
                suffix = f"{run}/{name}" if len(self.metrics) > 1 else run
                train = rs.metric_series(name, "train")
                if train is not None:
                    size = train.recent_size() if self.window == "recent" else None
                    xs, ys = train.points(size)
                    self.points[f"train/{suffix}"] = self._prepare(xs, ys, axis)
                    self.key_colors[f"train/{suffix}"] = run_color(i)
                    if self.smoothing:
                        mx, my, ns = train.means(size)
                        sx, sy = ema(mx, my, ns, self.smoothing)
                        self.smoothed[f"train/{suffix}"] = self._prepare(sx, sy, axis, count=False)
                valid = rs.metric_series(name, "valid")
                if valid is not None:
                    xs, ys = valid.points()
                    self.points[f"valid/{suffix}"] = self._prepare(xs, ys, axis)
                    self.key_colors[f"valid/{suffix}"] = _blend(run_color(i), (255, 255, 255), 0.75)
        self.points = {k: v for k, v in self.points.items() if v[0]}
        self.boundaries = []  # each run has its own epochs
        self._set_title(state)
        self._set_subtitle()
        self._version += 1
        self.refresh()

    def _prepare(self, xs, ys, axis, count: bool = True) -> tuple[list[float], list[float]]:
        if axis:
            xs = axis.map(xs)
        n = len(xs)
        xs, ys = finite_for(xs, ys, self.log_scale)
        if count:
            self.skipped += n - len(xs)
        return xs, ys

    def _set_title(self, state: DashboardState) -> None:
        """The chart's name, then each metric's latest train value, latest valid value and best valid
        value, in the series' colours (the legend, outside the data): in words when there is room."""
        # Textual draws a border title as "╭─ title ─╮": six cells of the outer width are not the title's
        room = max(self.outer_size.width - 6, 10) if self.size.width else 80
        self._name_width = max(8, min(NAME_WIDTH, room // 2))  # a long name gives way to the numbers
        title = Text()
        for form, digits in (("long", 4), ("short", 4), ("tight", 4), ("tight", 3)):
            title = self._title(state, form, digits)
            if title.cell_len <= room:
                break
        self.title_text = title.plain
        self.border_title = title

    def _title(self, state: DashboardState, form: str, digits: int = 4) -> Text:
        hexed = lambda c: Style(color="#%02x%02x%02x" % c)  # noqa: E731
        runs = getattr(state, "runs", None)
        if runs:  # compared runs: each one's latest train value and best valid value, in its colour
            from tuitrain.dashboard.compare import run_color

            title = Text(safe_name(self.chart or "metrics", self._name_width), style="bold")
            name = self.metric
            for i, rs in enumerate(runs.values()):
                latest, best = rs.latest.get(f"train/{name}"), rs.best_valid(name)
                if latest is None and best is None:
                    continue
                title.append(f"  ━{i + 1} " if form != "tight" else f" {i + 1}:", style=hexed(run_color(i)))
                title.append(short(latest, digits) if latest is not None else "-")
                if best is not None and form == "long":
                    title.append(f" ★{short(best, digits)}")
            return title
        train_style, valid_style = hexed(self._series_color("train")), hexed(self._series_color("valid"))
        gap = " " if form == "tight" else "  "
        title = Text()
        title.append(safe_name(self.chart or "metrics", self._name_width), style="bold")
        for i, name in enumerate(self.metrics):
            if len(self.metrics) > 1:
                title.append(f"{gap}{safe_name(name, self._name_width)}", style=hexed(self._series_color("train") if i == 0
                                                          else EXTRA[(i - 1) % len(EXTRA)]))
            latest, valid = state.latest.get(f"train/{name}"), state.metric_series(name, "valid")
            if latest is not None:
                label = "━ train " if form == "long" else "━ " if form == "short" else "━"
                title.append_text(Text.assemble(gap, (label, train_style), short(latest, digits)))
            if valid is not None:
                best = state.best_valid(name)
                label = "• valid " if form == "long" else "• " if form == "short" else "•"
                title.append_text(Text.assemble(gap, (label, valid_style), short(valid.last[1], digits) if valid.last else "-",
                                                gap, "best " if form != "tight" else "★",
                                                short(best, digits) if best is not None else "-"))
        return title

    def _set_subtitle(self) -> None:
        tools = []
        if self.x_axis != "step":
            tools.append(f"x {AXIS_NAMES[self.x_axis]}")
        if self.log_scale:
            tools.append("log")
        if self.smoothing:
            tools.append(f"EMA {self.smoothing:g}")
        if self.window == "recent":
            tools.append("recent")
        if self.skipped:
            tools.append(f"{self.skipped} not drawn" + (" (<= 0)" if self.log_scale else ""))
        self.border_subtitle = " · ".join(tools)

    # --- the reading tools (the app's keys) ------------------------------------------------

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

    # --- drawing -------------------------------------------------------------------------

    def _draw(self, width: int, height: int) -> str:
        """The chart as plotext's ANSI text, through its public module API (one figure, reused)."""
        _, _, bg, fg = self.colors
        background, foreground = _rgb(bg), _rgb(fg)
        plt = plotext
        plt.clf()
        plt.limitsize(False, False)
        plt.plotsize(width, height)
        plt.canvas_color(background)
        plt.axes_color(background)
        plt.ticks_color(foreground)
        if not self.points:
            plt.xticks([])
            plt.yticks([])
            plt.text("waiting for values", x=0.5, y=0.5, alignment="center", color=foreground)
            plt.xlim(0, 1)
            plt.ylim(0, 1)
            return plt.build()
        buckets = max(10, width - 8)  # braille: a column shows its min and max, no more
        for x in self.boundaries:
            plt.vline(x, color=self._series_color("epoch"))
        train, valid = self._series_color("train"), self._series_color("valid")
        for i, key in enumerate(k for k in self.points if k.startswith("train")):
            color = self.key_colors.get(key) or (train if i == 0 else EXTRA[(i - 1) % len(EXTRA)])
            xs, ys = thin(*self.points[key], buckets)
            if key in self.smoothed:
                plt.plot(xs, ys, marker="braille", color=_blend(color, background, 0.35))
                sx, sy = thin(*self.smoothed[key], buckets)
                if sx:
                    plt.plot(sx, sy, marker="braille", color=color)
            else:
                plt.plot(xs, ys, marker="braille", color=color)
        for i, key in enumerate(k for k in self.points if k.startswith("valid")):
            color = self.key_colors.get(key) or (
                valid if i == 0 else _blend(EXTRA[(i - 1) % len(EXTRA)], (255, 255, 255), 0.7))
            xs, ys = thin(*self.points[key], buckets)
            plt.plot(xs, ys, marker="dot", color=color)
        xs_all = [x for xs, _ in self.points.values() for x in xs]
        ys_all = [y for _, ys in self.points.values() for y in ys]
        x_lo, x_hi = min(xs_all), max(xs_all)
        y_lo, y_hi = min(ys_all), max(ys_all)
        if x_hi > x_lo:
            plt.xlim(x_lo, x_hi)
        x_ticks = nice_ticks(x_lo, x_hi, max(3, width // 12), integer=self.x_axis in ("step", "samples"))
        plt.xticks(x_ticks, tick_labels(x_ticks, self.x_axis))
        rows = max(2, (height - 2) // 2)
        if self.log_scale:
            plt.yscale("log")
        if y_hi <= y_lo:  # a constant (the lr without a schedule): the value in the middle
            pad = abs(y_lo) * 0.5 or 1.0
            lo, hi = (y_lo / 2, y_lo * 2) if self.log_scale else (y_lo - pad, y_lo + pad)
            plt.ylim(lo, hi)
            plt.yticks([y_lo], tick_labels([y_lo]))
        else:
            y_ticks = log_ticks(y_lo, y_hi, rows) if self.log_scale else nice_ticks(y_lo, y_hi, rows)
            plt.yticks(y_ticks, tick_labels(y_ticks))
        return plt.build()

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
            if width >= 8 and height >= 3:
                text = Text.from_ansi(self._draw(width, height))
                console = self.app.console
                for line in text.split("\n", allow_blank=True)[:height]:
                    lines.append(Strip(list(line.render(console))).crop_extend(0, width, style))
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
        if self._state is not None:
            self.show(self._state)  # the title's words and the epoch lines follow the width
        self._rendered = None
        self.refresh()
