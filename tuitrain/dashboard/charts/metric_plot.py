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

import bisect
import math
import time

from rich.style import Style
from rich.text import Text
from textual import events
from textual.strip import Strip
from textual.widget import Widget

from tuitrain.core.text import NAME_WIDTH, safe_name
from tuitrain.dashboard.charts.plan import SMOOTHING, ema, finite_for, short, thin
from tuitrain.dashboard.charts.drawing import Drawn, Line, Palette, blend, draw_chart, hex_of, rgb_of
from tuitrain.dashboard.state.model import DashboardState

MAX_BOUNDARIES = 12  # epoch lines drawn at most
AXIS_NAMES = {"step": "step", "epoch": "epoch", "time": "wall time", "samples": "samples"}
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
COMPARED_FORMS = [("long", 4), ("short", 4), ("tight", 4), ("tight", 3)]

# kept for older importers: the thinning lives in tuitrain/dashboard/charts/plan.py (benchmarks import it from
# here), the drawing in tuitrain/dashboard/charts/drawing.py
__all__ = ["Drawn", "Line", "MetricPlot", "Palette", "draw_chart", "thin"]


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
        self.key_colors: dict[str, tuple[int, int, int]] = {}  # compared runs: each run's colour
        self.skipped = 0  # points left out: not finite, or <= 0 on a log scale
        self.title_text = ""
        self._best_note = ""  # "best 0.48", in the bottom border where the title has no room for it
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
        self.points, self.smoothed, self.steps, self.skipped, self.origin = {}, {}, {}, 0, {}
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
        if xs_all and getattr(state, "alerts", None):  # each alert episode's first step (SPEC "Health")
            x_lo, x_hi = min(xs_all), max(xs_all)
            marks = [axis(s) if axis else s for s in state.alert_steps() if lo is None or s >= lo]
            self.alert_marks = [x for x in marks if x is not None and x_lo <= x <= x_hi]
        self._set_title(state)
        self._set_subtitle()
        self._replotted()

    def _replotted(self) -> None:
        if self.cursor is not None:
            self.cursor = self._snap(self.cursor)
        self._version += 1
        self.refresh()

    def _show_runs(self, state: DashboardState, runs: dict) -> None:
        from tuitrain.dashboard.state.compare import color_indexes, run_color

        self.key_colors = {}
        numbers = color_indexes(state, runs)  # a run's colour is its own, shown or not
        drawn = state.drawn_runs() if hasattr(state, "drawn_runs") else list(runs)  # the pinned last: on top
        for run in drawn:
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
        runs = getattr(state, "runs", None)
        for form in COMPARED_FORMS if runs else FORMS:
            title = self._title(state, form)
            if title.cell_len <= room:
                break
        self.title_text = title.plain
        self.border_title = title

    def _title(self, state: DashboardState, form: tuple) -> Text:
        hexed = lambda c: Style(color="#%02x%02x%02x" % c)  # noqa: E731
        runs = getattr(state, "runs", None)
        if runs:  # compared runs: each one's latest train value and best valid value, in its colour
            from tuitrain.dashboard.state.compare import color_indexes, run_color

            form, digits = form
            title = Text(safe_name(self.chart or "metrics", self._name_width), style="bold")
            name = self.metric
            numbers = color_indexes(state, runs)
            for run in state.shown_runs() if hasattr(state, "shown_runs") else list(runs):  # the pinned first
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
        the files cannot tell."""
        origin, value_at = self.origin.get(line.key), getattr(self._state, "value_at", None)
        if origin is None or value_at is None:
            return shown
        run, split, name = origin
        found = value_at(split, name, step, run)
        if found is None:
            return shown
        i = line.at(self.cursor)
        own = line.steps[i] if i >= 0 and line.steps is not None else -math.inf
        return found[1] if found[0] >= own else shown

    def _readout(self, lines: list[Line], width: int) -> list[Text]:
        """The inspect line(s) above the canvas: the step (and the x, on another x axis), then each
        series' glyph, name and value in its colour; shorter forms when the width is short."""
        step, values = self.readout()
        fg = self.palette().foreground
        where = f"step {step:,.0f}" if step is not None else f"{AXIS_NAMES[self.x_axis]} {short(self.cursor)}"
        if step is not None and self.x_axis != "step":
            where += f" · {AXIS_NAMES[self.x_axis]} {short(self.cursor, 4)}"
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

    def lines(self) -> list[Line]:
        """The series as drawn and read: train lines (raw, faint under a smoothed one), valid marks."""
        _, _, bg, _ = self.colors
        background = rgb_of(bg)
        train, valid = self._series_color("train"), self._series_color("valid")
        runs = list(getattr(self._state, "runs", None) or [])
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

    def palette(self) -> Palette:
        _, _, bg, fg = self.colors
        background, foreground = rgb_of(bg), rgb_of(fg)
        return Palette(
            background, foreground, blend(foreground, background, 0.22), self._series_color("epoch"), foreground
        )

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
        if self._state is not None:
            self.show(self._state)  # the title's words and the epoch lines follow the width
        self._rendered = None
        self.refresh()
