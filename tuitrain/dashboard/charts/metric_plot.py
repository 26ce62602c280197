"""`MetricPlot`: one chart of the grid: the train and valid series of one metric (or of a few that
share a chart, `g_loss`/`d_loss`), its latest and best values in its title, and its own reading
tools: log scale, smoothing, x axis, window.

`show(state)` takes the points from the bounded series in `DashboardState` (a few thousand at most,
whatever the history's length); `frame()` draws them on the UI thread, one chart after another, with
`draw_chart` (tuitrain/dashboard/charts/drawing.py: the axes, labels, grid and marks cell by cell, the
braille lines by plotext). Colours come from the theme's CSS: the widget's own background/color for
canvas and axes, the component classes for the series.

Inspect (`i`): `inspect()`, `move_cursor()`, `cursor_to_column()`; `readout()` gives the step under
the cursor and each series' value at or before it, shown in a line above the canvas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text

from tuitrain.core.text import NAME_WIDTH, safe_name
from tuitrain.dashboard.charts.chart import AXIS_NAMES, Chart
from tuitrain.dashboard.charts.drawing import Drawn, Line, Palette, blend, draw_chart, rgb_of
from tuitrain.dashboard.charts.kinds import ChartKind, register, shown_by_filter
from tuitrain.dashboard.charts.plan import ema, finite_for, group_metrics, short, thin
from tuitrain.dashboard.state.devices import DEVICE_PREFIX
from tuitrain.dashboard.state.compared import compared
from tuitrain.dashboard.state.model import DashboardState

if TYPE_CHECKING:
    from tuitrain.dashboard.state.compare import CompareState

MAX_BOUNDARIES = 12  # epoch lines drawn at most
EXTRA = [(80, 200, 120), (220, 110, 200), (230, 220, 90), (120, 220, 230)]  # a group's further metrics

#: the title's forms, the first that fits: (in words, best value in the title, gap, digits); in words
#: without the best value, it is in the bottom border
FORMS = [
    (True, True, "  ", 4),
    (True, False, "  ", 4),
    (True, False, " ", 4),
    (True, False, " ", 3),
    (False, True, "  ", 4),
    (False, True, " ", 4),
    (False, True, " ", 3),
]
#: (form, digits, labelled: the numbers' kind said after the name) of a compared chart's title, longest first
COMPARED_FORMS = [("long", 4, True), ("short", 4, True), ("tight", 4, True), ("tight", 4, False), ("tight", 3, False)]

# kept for older importers: the thinning lives in tuitrain/dashboard/charts/plan.py (benchmarks import it from
# here), the drawing in tuitrain/dashboard/charts/drawing.py
__all__ = ["Drawn", "Line", "MetricPlot", "Palette", "draw_chart", "thin"]


class MetricPlot(Chart):
    """A chart of `metrics` (one name, or a group that shares a chart) named `chart`: the kinds "lines"
    (training metrics) and "devices" (the device history)."""

    def __init__(
        self, chart: str = "", metrics: list[str] | None = None, *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(chart, metrics, id=id, classes=classes)
        self.key_colors: dict[str, tuple[int, int, int]] = {}  # compared runs: each run's colour
        self._best_note = ""  # "best 0.48", in the bottom border where the title has no room for it

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
        self.points, self.smoothed, self.steps, self.skipped, self.origin = {}, {}, {}, 0, {}
        if state.kind != "run":  # several runs compared: each one's series, in its own colour
            self._show_runs(compared(state))
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
            self._keep(key, xs, ys, axis, (None, "train", name))
            if self.smoothing:
                mx, my, ns = train.means(size)
                sx, sy = ema(mx, my, ns, self.smoothing)
                self.smoothed[key] = self._prepare(sx, sy, axis, count=False)[:2]
        for name in self.metrics:
            valid = state.metric_series(name, "valid")
            if valid is None:
                continue
            xs, ys = valid.points()
            if lo is not None:  # valid points older than the recent train window would stretch the axis
                kept = [(x, y) for x, y in zip(xs, ys) if x >= lo]
                xs, ys = [p[0] for p in kept], [p[1] for p in kept]
            self._keep(f"valid/{name}" if group else "valid", xs, ys, axis, (None, "valid", name))
        self.points = {k: v for k, v in self.points.items() if v[0]}
        xs_all = [x for xs, _ in self.points.values() for x in (xs[0], xs[-1])]
        self.boundaries = []
        if xs_all and state.epoch_steps:
            x_lo, x_hi = min(xs_all), max(xs_all)
            steps = state.epoch_steps if lo is None else [s for s in state.epoch_steps if s >= lo]
            inside = [x for x in (axis(s) if axis else s for s in steps) if x_lo < x < x_hi]
            most = min(MAX_BOUNDARIES, max(1, (self.size.width - 10) // 6)) if self.size.width else MAX_BOUNDARIES
            every = -(-len(inside) // most)  # many epochs: every k-th line, 6 columns apart, or they hide the data
            self.boundaries = inside[every - 1 :: every] if inside else []
        self.alert_marks = []
        if xs_all and state.alerts:  # each alert episode's first step (SPEC "Health")
            x_lo, x_hi = min(xs_all), max(xs_all)
            marks = [axis(s) if axis else s for s in state.alert_steps() if lo is None or s >= lo]
            self.alert_marks = [x for x in marks if x is not None and x_lo <= x <= x_hi]
        self._set_title(state)
        self._set_subtitle()
        self._replotted()

    def _show_runs(self, state: CompareState) -> None:
        from tuitrain.dashboard.state.compare import color_indexes, run_color

        self.key_colors = {}
        runs = state.runs
        numbers = color_indexes(state, runs)  # a run's colour is its own, shown or not
        for run in state.drawn_runs():  # the pinned last: on top
            i, rs = numbers[run], runs[run]
            axis = rs.axes.get(self.x_axis)
            for name in self.metrics:
                suffix = f"{run}/{name}" if len(self.metrics) > 1 else run
                train = rs.metric_series(name, "train")
                if train is not None:
                    size = train.recent_size() if self.window == "recent" else None
                    xs, ys = train.points(size)
                    self._keep(f"train/{suffix}", xs, ys, axis, (run, "train", name))
                    self.key_colors[f"train/{suffix}"] = run_color(i)
                    if self.smoothing:
                        mx, my, ns = train.means(size)
                        sx, sy = ema(mx, my, ns, self.smoothing)
                        self.smoothed[f"train/{suffix}"] = self._prepare(sx, sy, axis, count=False)[:2]
                valid = rs.metric_series(name, "valid")
                if valid is not None:
                    xs, ys = valid.points()
                    self._keep(f"valid/{suffix}", xs, ys, axis, (run, "valid", name))
                    self.key_colors[f"valid/{suffix}"] = blend(run_color(i), (255, 255, 255), 0.75)
        self.points = {k: v for k, v in self.points.items() if v[0]}
        self.boundaries = []  # each run has its own epochs
        self._set_title(state)
        self._set_subtitle()
        self._replotted()

    def _keep(self, key: str, steps: list[float], ys: list[float], axis, origin: tuple | None = None) -> None:
        xs, ys, steps = self._prepare(steps, ys, axis)
        self.points[key] = (xs, ys)
        self.steps[key] = steps
        if origin is not None:
            self.origin[key] = origin  # (run or None, split, metric): where the inspect readout looks it up

    def _prepare(self, steps, ys, axis, count: bool = True) -> tuple[list[float], list[float], list[float]]:
        """(x values on the chart's x axis, values, steps) of the points that can be drawn."""
        n = len(steps)
        steps, ys = finite_for(steps, ys, self.log_scale)  # a finite step maps to a finite x
        if count:
            self.skipped += n - len(steps)
        return (axis.map(steps) if axis else list(steps)), ys, steps

    def _set_title(self, state: DashboardState) -> None:
        """The chart's name, then each metric's latest train value, latest valid value and best valid
        value, in the series' colours (the legend, outside the data): in words where there is room
        ("loss  train 0.1257 · valid 0.1329 · best 0.1329"); narrower, the best value moves to the
        bottom border, then the gaps and digits shrink, and last the words give way to the glyphs
        ━ • ★: the name and the numbers stay."""
        # Textual draws a border title as "╭─ title ─╮": six cells of the outer width are not the title's
        room = max(self.outer_size.width - 6, 10) if self.size.width else 80
        self._name_width = max(8, min(NAME_WIDTH, room // 2))  # a long name gives way to the numbers
        title = Text()
        for form in COMPARED_FORMS if state.kind != "run" else FORMS:
            title = self._title(state, form)
            if title.cell_len <= room:
                break
        self.title_text = title.plain
        self.border_title = title

    def _title(self, state: DashboardState, form: tuple) -> Text:
        hexed = lambda c: Style(color="#%02x%02x%02x" % c)  # noqa: E731
        if state.kind != "run":  # compared runs: each one's latest train value and best valid value, in its colour
            from tuitrain.dashboard.state.compare import color_indexes, run_color

            form, digits, labelled = form
            title = Text(safe_name(self.chart or "metrics", self._name_width), style="bold")
            if labelled:  # what the numbers are: each run's latest train value (★ its best valid one)
                title.append(" train" + (" · ★ best valid" if form == "long" else ""), style="dim")
            name = self.metric
            runs = compared(state).runs
            numbers = color_indexes(state, runs)
            for run in compared(state).shown_runs():  # the pinned first
                i, rs = numbers[run], runs[run]
                latest, best = rs.latest.get(f"train/{name}"), rs.best_valid(name)
                if latest is None and best is None:
                    continue
                title.append(f"  ━{i + 1} " if form != "tight" else f" {i + 1}:", style=hexed(run_color(i)))
                title.append(short(latest, digits) if latest is not None else "-")
                if best is not None and form == "long":
                    title.append(f" ★{short(best, digits)}")
            return title
        words, best_here, gap, digits = form
        best_here = best_here or len(self.metrics) > 1  # a group's bests stay with their metrics
        sep = " · " if gap == "  " else " "
        train_style, valid_style = hexed(self._series_color("train")), hexed(self._series_color("valid"))
        device = (self.chart or "").startswith("device/")  # a device figure has no splits
        title = Text()
        title.append(safe_name(self.chart or "metrics", self._name_width), style="bold")
        self._best_note = ""
        for i, name in enumerate(self.metrics):
            if len(self.metrics) > 1:
                color = self._series_color("train") if i == 0 else EXTRA[(i - 1) % len(EXTRA)]
                title.append(f"{gap}{safe_name(name, self._name_width)}", style=hexed(color))
            latest, valid = state.latest.get(f"train/{name}"), state.metric_series(name, "valid")
            if latest is not None:
                label = ("" if device else "train ") if words else ("━ " if gap == "  " else "━")
                title.append_text(Text.assemble(gap, (label, train_style), short(latest, digits)))
            if valid is not None:
                best = state.best_valid(name)
                best_text = short(best, digits) if best is not None else "-"
                shown = short(valid.last[1], digits) if valid.last else "-"
                if words:
                    title.append_text(Text.assemble(sep if latest is not None else gap, ("valid ", valid_style), shown))
                    if best_here:
                        title.append(f"{sep}best {best_text}")
                    else:
                        self._best_note = f"best {best_text}"
                else:
                    title.append_text(
                        Text.assemble(
                            gap,
                            ("• " if gap == "  " else "•", valid_style),
                            shown,
                            gap,
                            "best " if gap == "  " else "★",
                            best_text,
                        )
                    )
        return title

    def _set_subtitle(self) -> None:
        tools = [self._best_note] if self._best_note else []  # the best value, where the title had no room
        if self.x_axis != "step":
            tools.append(f"x {AXIS_NAMES[self.x_axis]}")
        if self.log_scale:
            tools.append("log")
        if self.smoothing:
            tools.append(f"EMA {self.smoothing:g}")
        if self.window == "recent":
            tools.append("recent")
        if self.cursor is not None:
            tools.append("inspect ←/→")
        if self.skipped:
            tools.append(f"{self.skipped} not drawn" + (" (<= 0)" if self.log_scale else ""))
        self.border_subtitle = " · ".join(tools)

    # --- drawing -------------------------------------------------------------------------

    def lines(self) -> list[Line]:
        """The series as drawn and read: train lines (raw, faint under a smoothed one), valid marks."""
        _, _, bg, _ = self.colors
        background = rgb_of(bg)
        train, valid = self._series_color("train"), self._series_color("valid")
        state = self._state
        runs = list(compared(state).runs) if state is not None and state.kind != "run" else []
        group = len(self.metrics) > 1
        out: list[Line] = []

        def name(key: str) -> tuple[str, str, str]:
            """(the run's number when comparing, the series' long name, its short name)."""
            rest = key.partition("/")[2]
            if runs:  # "run" or "run/metric": numbered as in the title, named as in the legend
                run, _, metric = rest.partition("/")
                return (str(runs.index(run) + 1) if run in runs else "?"), f"{run} {metric}".strip(), metric
            return "", (rest if group else ""), (rest if group else "")

        for i, key in enumerate(k for k in self.points if k.startswith("train")):
            color = self.key_colors.get(key) or (train if i == 0 else EXTRA[(i - 1) % len(EXTRA)])
            xs, ys = self.points[key]
            number, long, tag = name(key)
            steps = self.steps.get(key)
            if key in self.smoothed:
                out.append(
                    Line(
                        key,
                        xs,
                        ys,
                        blend(color, background, 0.35),
                        "braille",
                        "━" + number,
                        long or "train",
                        steps,
                        tag,
                    )
                )
                sx, sy = self.smoothed[key]
                out.append(Line(f"~{key}", sx, sy, color, "braille", "~" + number, f"{long} EMA".strip(), None, tag))
            else:
                out.append(Line(key, xs, ys, color, "braille", "━" + number, long or "train", steps, tag))
        for i, key in enumerate(k for k in self.points if k.startswith("valid")):
            color = self.key_colors.get(key) or (
                valid if i == 0 else blend(EXTRA[(i - 1) % len(EXTRA)], (255, 255, 255), 0.7)
            )
            xs, ys = self.points[key]
            number, long, tag = name(key)
            out.append(Line(key, xs, ys, color, "dot", "•" + number, long or "valid", self.steps.get(key), tag))
        return out

    def _draw(self, width: int, height: int) -> Drawn:
        lines = self.lines()
        header = self._readout(lines, width) if self.cursor is not None else []
        return draw_chart(
            lines,
            width,
            height,
            self.palette(),
            x_kind=self.x_axis,
            log=self.log_scale,
            boundaries=self.boundaries,
            cursor=self.cursor,
            header=header,
            alerts=self.alert_marks,
        )


# --- the kinds: a metric's lines, and the device history's (shown when a filter names it: `/cpu`) -----


def _metric_charts(state: DashboardState, devices: bool) -> list[tuple[str, list[str]]]:
    names = [n for n in state.metric_names if n.startswith(DEVICE_PREFIX) == devices]
    return group_metrics(names)


def _make(name: str, metrics: list[str]) -> MetricPlot:
    return MetricPlot(name, metrics, classes="panel chart")


register(ChartKind("lines", 0, lambda state: _metric_charts(state, False), _make, by_name=True))
register(ChartKind("devices", 10, lambda state: _metric_charts(state, True), _make, shown_by_filter, by_name=True))
