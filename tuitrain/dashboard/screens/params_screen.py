"""`ParamsScreen`: a sweep's parameters view (`P`): for each searched parameter a chart of each trial's best
value of the sweep's metric against the parameter's value (`ParamPlot`: a log x axis where the parameter
is searched on one, a choice's values evenly spaced and named), and the trials as parallel coordinates
(`ParallelPlot`: an axis per parameter and one for the metric); the best trial marked ★ in both and
named in the title, pruned or failed trials dim, running ones hollow, a completed trial's line the
brighter the better its value. It follows the sweep live: the
points are read from the app's `SweepState` every second. P, Esc or q: back.

How each key is searched (log, choices, range) is tuitrain/dashboard/state/params.py's to say.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from tuitrain.core.text import safe_name
from tuitrain.dashboard.charts.drawing import Line, Palette, blend, draw_chart, rgb_of
from tuitrain.dashboard.fmt import format_value
from tuitrain.dashboard.charts.parallel import Column, draw_parallel
from tuitrain.dashboard.state.params import (
    DONE,
    GOING,
    ParamAxis,
    TrialPoint,
    label_of,
    param_axes,
    parallel,
    searched,
    trial_points,
)
from tuitrain.dashboard.state.sweep import column_heads
from tuitrain.dashboard.screens.modal import Modal

BEST = (240, 160, 48)  # the best trial, over everything
DONE_COLOR = (60, 155, 232)  # the completed trials
GOING_COLOR = (80, 200, 120)  # the running ones
#: (mark, what it stands for) as the legend writes them
MARKS = [("★", "best"), ("•", "completed"), ("○", "running"), ("·", "ended early (pruned, stopped, failed)")]


def palette_of(widget: Widget) -> Palette:
    _, _, bg, fg = widget.colors
    background, foreground = rgb_of(bg), rgb_of(fg)
    return Palette(background, foreground, blend(foreground, background, 0.22), foreground, foreground)


def kind_of(point: TrialPoint) -> str:
    """How a trial is drawn: "best", "done", "going" or "cut" (pruned, interrupted, failed, killed)."""
    if point.best:
        return "best"
    return "done" if point.status in DONE else "going" if point.status in GOING else "cut"


def color_of(kind: str, palette: Palette) -> tuple[int, int, int]:
    return {"best": BEST, "done": DONE_COLOR, "going": GOING_COLOR}.get(
        kind, blend(palette.foreground, palette.background, 0.4)
    )


class _Drawn(Widget):
    """A widget that shows strips it builds itself, again only when its data or size changed."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data: tuple = ()
        self._rendered: tuple | None = None

    def show(self, data: tuple) -> None:
        if data != self.data:
            self.data = data
            self.refresh()

    def build(self, width: int, height: int) -> list[Strip]:
        raise NotImplementedError

    def render_line(self, y: int) -> Strip:
        width, height = self.content_size
        key = (self.data, width, height, self.app.theme, self.colors)
        if self._rendered is None or self._rendered[0] != key:
            lines = self.build(width, height) if width >= 1 and height >= 1 else []
            self._rendered = (key, [ln.crop_extend(0, width, self.rich_style) for ln in lines[:height]])
        lines = self._rendered[1]
        return lines[y] if y < len(lines) else Strip.blank(width, self.rich_style)


class ParamPlot(_Drawn):
    """One parameter: each trial with a value, its best value (y) against the parameter's (x)."""

    DEFAULT_CSS = "ParamPlot { width: 1fr; height: 1fr; border: round $panel-lighten-2; }"

    def __init__(self, axis: ParamAxis, **kwargs) -> None:
        super().__init__(**kwargs)
        self.axis = axis
        self.head = axis.key  # its title's first words: the key's name, and whether its axis is log
        self.text = ""  # what it drew, as plain text (tests read it)

    def build(self, width: int, height: int) -> list[Strip]:
        axis, points = self.data
        points = [p for p in points if p.value is not None]
        palette = palette_of(self)
        lines = []
        for kind, mark in (("cut", "·"), ("going", "○"), ("done", "•"), ("best", "★")):  # the best drawn last, on top
            xs, ys = [], []
            for p in points:
                x = axis.position(p.values.get(axis.key))
                if kind_of(p) == kind and x is not None:
                    xs.append(x)
                    ys.append(p.value)
            if xs:
                lines.append(Line(kind, xs, ys, color_of(kind, palette), mark))
        choices = axis.labels() if axis.kind == "choice" else None
        x_range = () if choices else tuple(axis.span([p.values.get(axis.key) for p in points]))
        drawn = draw_chart(
            lines,
            width,
            height,
            palette,
            x_kind="log" if axis.kind == "log" else "",
            x_choices=choices,
            x_range=x_range,
            message="no trial with a value yet",
        )
        self.text = "\n".join(line.text for line in drawn.lines)
        return drawn.lines


class ParallelPlot(_Drawn):
    """The trials as parallel coordinates: an axis per parameter, then the metric's; a completed trial's
    line the brighter the better its value."""

    DEFAULT_CSS = "ParallelPlot { width: 1fr; height: 1fr; border: round $panel-lighten-2; }"

    def __init__(self, lower_is_better: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lower_is_better = lower_is_better
        self.text = ""

    def build(self, width: int, height: int) -> list[Strip]:
        columns, lines, points = self.data
        lines = dict(lines)
        palette = palette_of(self)
        lower = self.lower_is_better
        order = {"cut": 0, "going": 1, "done": 2, "best": 3}  # the best drawn last, on top

        def color(p: TrialPoint) -> tuple[int, int, int]:
            """A completed trial the brighter the better its value (its place on the metric's axis)."""
            kind, place = kind_of(p), lines[p.name][-1]
            share = 0.3 + 0.7 * ((1 - place) if lower else place)
            return blend(DONE_COLOR, palette.background, share) if kind == "done" else color_of(kind, palette)

        shown = sorted(
            (p for p in points if p.name in lines),  # the better drawn later, over the worse
            key=lambda p: (order[kind_of(p)], -lines[p.name][-1] if lower else lines[p.name][-1]),
        )
        drawn = [
            Line(p.name, list(range(len(lines[p.name]))), lines[p.name], color(p), "★" if p.best else "braille")
            for p in shown
        ]
        strips = draw_parallel([Column(name, tuple(ticks)) for name, ticks in columns], drawn, width, height, palette)
        self.text = "\n".join(line.text for line in strips)
        return strips


class ParamsScreen(Modal[None]):
    """The parameters view of the sweep `state` (a `SweepState`), followed live."""

    BINDINGS = [
        Binding("escape", "dismiss", "Back"),
        Binding("P", "dismiss", "Back", show=False),
        Binding("q", "dismiss", "Back", show=False),
    ]

    DEFAULT_CSS = """
    ParamsScreen { background: $background; }
    #params-box { width: 100%; height: 100%; }
    #params-title, #params-legend, #params-back { height: 1; width: 100%; }
    #params-legend, #params-back { color: $text-muted; }
    #params-scatter { height: 1fr; layout: grid; grid-size: 3; }
    #params-parallel { height: 1fr; }
    """

    #: seconds between looks at the sweep's state (new trials, new values)
    INTERVAL = 1.0

    def __init__(self, state) -> None:
        super().__init__()
        self.state = state
        self.declared = searched(state.sweep.config) if state.sweep.config else {}
        self.axes: list[ParamAxis] = []
        self.title_text = ""

    def compose(self) -> ComposeResult:
        points = trial_points(self.state)
        self.axes = param_axes(list(self.state.sweep.params), points, self.declared)
        with Vertical(id="params-box"):
            yield Static(id="params-title")
            legend = "  ".join(f"{mark} {what}" for mark, what in MARKS)
            metric = self.state.sweep.metric or "the metric"
            yield Static(  # what y is first: a narrow screen cuts the marks' last words, not it
                Text(
                    f"y: each trial's best {metric} ({self.state.sweep.mode})  {legend}",
                    no_wrap=True,
                    overflow="ellipsis",
                ),
                id="params-legend",
            )
            with Container(id="params-scatter"):
                for i, (axis, head) in enumerate(zip(self.axes, column_heads([a.key for a in self.axes]))):
                    plot = ParamPlot(axis, id=f"param-{i}")
                    plot.head = safe_name(head, 60) + (" (log)" if axis.kind == "log" else "")
                    plot.border_title = plot.head
                    yield plot
            yield ParallelPlot(self.state.sweep.mode == "min", id="params-parallel")
            yield Static(Text("P, Esc or q: back to the dashboard", no_wrap=True), id="params-back")

    def on_mount(self) -> None:
        self.fit()
        self.update()
        self.set_interval(self.INTERVAL, self.update)

    def on_resize(self) -> None:
        self.fit()

    def fit(self) -> None:
        """As many parameter charts a row as fit at 30 columns or more (the rest below)."""
        n = max(len(self.axes), 1)
        for grid in self.query("#params-scatter"):  # none once closing: a resize may come after the dismissal
            grid.styles.grid_size_columns = max(1, min(n, self.app.size.width // 30))

    def update(self) -> None:
        """The trials as they are now: the charts, the titles."""
        if self.closing or not self.query("#params-title"):  # dismissed: its widgets are going
            return
        points = trial_points(self.state)
        axes = param_axes(list(self.state.sweep.params), points, self.declared)
        if [(a.key, a.kind) for a in axes] == [(a.key, a.kind) for a in self.axes]:
            self.axes = axes  # a choice seen for the first time, say
        plots = list(self.query(ParamPlot))
        best = next((p for p in points if p.best), None)
        for plot, axis in zip(plots, self.axes):
            plot.axis = axis
            plot.show((axis, tuple(points)))
            plot.border_title = (
                plot.head
                if best is None
                else (f"{plot.head} · ★ ━{best.number} {safe_name(label_of(best.values.get(axis.key, '-')), 20)}")
            )
        columns, lines = parallel(self.axes, points, self.state.sweep.metric)
        par = self.query_one(ParallelPlot)
        par.show((tuple((name, tuple(ticks)) for name, ticks in columns), tuple(sorted(lines.items())), tuple(points)))
        par.border_title = "parallel coordinates" + (f" · ★ best ━{best.number}" if best else "")
        self.title_text = self.headline(points, best)
        self.query_one("#params-title", Static).update(
            Text(self.title_text, style="bold", no_wrap=True, overflow="ellipsis")
        )

    def headline(self, points: list[TrialPoint], best: TrialPoint | None) -> str:
        """parameters of sweep spirals · 8 trials, 6 with a value · best ━3 0.9925: max_lr=0.0123 hidden=64 ..."""
        sweep = self.state.sweep
        valued = sum(1 for p in points if p.value is not None)
        text = f"parameters of sweep {safe_name(sweep.name, 40)} · {len(points)} trial{'s' if len(points) != 1 else ''}"
        text += f", {valued} with a value" if valued != len(points) else ""
        if best is None:
            return text + " · no completed trial yet"
        heads = column_heads(list(sweep.params))
        settings = " ".join(f"{h}={label_of(best.values[k])}" for h, k in zip(heads, sweep.params) if k in best.values)
        value = format_value(best.value) if best.value is not None and math.isfinite(best.value) else "-"
        return f"{text} · best ━{best.number} {value}: {settings}"


__all__ = ["ParallelPlot", "ParamPlot", "ParamsScreen"]
