"""How one chart is drawn: `draw_chart` lays a chart's series (`Line`) out as `height` strips of
`width` cells in a `Palette`'s colours: the axes, labels, grid, epoch lines, cursor and marks cell by
cell, on axes snapped to the cells (`charts.snap_axis`), and the braille lines by plotext's public
module API (`plotext.plot`, `plotext.build`, ...) on a frameless canvas. `MetricPlot`
(dashboard/charts/metric_plot.py) gathers the lines from the state and shows what this draws.

Knows nothing of widgets or of the run: series and colours in, strips out. Must not import the run
layer (`tuitrain.config`, `tuitrain.run*`, `tuitrain.cli`).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import plotext
from rich.ansi import AnsiDecoder
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from tuitrain.dashboard.charts.plan import Axis, snap_axis, thin


def rgb_of(color) -> tuple[int, int, int]:
    return (color.r, color.g, color.b)


def blend(a: tuple[int, int, int], b: tuple[int, int, int], share: float) -> tuple[int, int, int]:
    """`share` of colour a over colour b: the faint raw series behind a smoothed one."""
    return tuple(round(x * share + y * (1 - share)) for x, y in zip(a, b))  # type: ignore[return-value]


def hex_of(color: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % color


class Line:
    """One drawn series: its points, colour, marker ("braille": a line; "dot": a • per point; any other
    one character: that mark per point) and
    how the inspect readout names it (`glyph` in its colour, then `label`, or `short` where room is
    short); `steps`: the global step of each point, when the x axis is another."""

    __slots__ = ("key", "xs", "ys", "color", "marker", "glyph", "label", "steps", "short")

    def __init__(
        self,
        key: str,
        xs: list[float],
        ys: list[float],
        color: tuple[int, int, int],
        marker: str,
        glyph: str = "━",
        label: str = "",
        steps: list[float] | None = None,
        short: str = "",
    ) -> None:
        self.key, self.xs, self.ys, self.color, self.marker = key, xs, ys, color, marker
        self.glyph, self.label, self.steps, self.short = glyph, label, steps, short

    def at(self, x: float) -> int:
        """The index of the point at or before x (-1: none)."""
        return bisect.bisect_right(self.xs, x) - 1


@dataclass
class Palette:
    background: tuple[int, int, int]
    foreground: tuple[int, int, int]
    grid: tuple[int, int, int]
    epoch: tuple[int, int, int]
    cursor: tuple[int, int, int]
    alert: tuple[int, int, int] = (229, 83, 75)  # the marks of health alerts


@dataclass
class Drawn:
    """A chart drawn: its lines, its axes and where its canvas lies (for the cursor and for tests)."""

    lines: list[Strip]
    x: Axis | None = None
    y: Axis | None = None
    left: int = 0  # the canvas's first column
    top: int = 0  # the canvas's first row


def _cells_of(text: Text, width: int, base: Style) -> list[list]:
    """A line of plotext's ANSI output as [char, style] cells."""
    plain = text.plain[:width]
    styles = [base] * len(plain)
    for span in text.spans:  # plotext's spans do not overlap: one style a span
        style = base + (span.style if isinstance(span.style, Style) else Style.parse(span.style))
        end = min(span.end, len(plain))
        styles[span.start : end] = [style] * max(0, end - span.start)
    cells = [[ch, st] for ch, st in zip(plain, styles)]
    return cells + [[" ", base] for _ in range(width - len(cells))]


_SGR = re.compile(r"\x1b\[([0-9;]*)m")  # Select Graphic Rendition: all plotext writes but text
_STYLES: dict[str, Style | None] = {}  # runs of escape codes -> style: a few per colour drawn


def _decoded(codes: str) -> Style | None:
    """The style a run of SGR escape codes leaves, as rich's AnsiDecoder makes it (None: no style)."""
    if codes not in _STYLES:
        decoder = AnsiDecoder()
        decoder.decode_line(codes)
        _STYLES[codes] = decoder.style or None
    return _STYLES[codes]


def rich_cells(ansi: str, width: int, base: Style) -> list[list]:
    """Any ANSI text as rows of [char, style] cells, read by rich (`Text.from_ansi`): what `ansi_cells` reads
    faster where the text holds only SGR codes."""
    return [_cells_of(line, width, base) for line in Text.from_ansi(ansi).split("\n", allow_blank=True)]


def ansi_cells(ansi: str, width: int, base: Style) -> list[list] | None:
    """plotext's output as rows of [char, style] cells, `width` a row, each what `Text.from_ansi` and
    `_cells_of` make of it (the style base + the codes' style), each distinct run of escape codes decoded once;
    None where the output holds more than text and SGR codes (a carriage return, another escape)."""
    if "\r" in ansi:
        return None
    if len(_STYLES) > 4096:
        _STYLES.clear()
    parts = _SGR.split(ansi)  # text, codes, text, codes, ..., text
    rows: list[list] = [[]]
    codes = ""  # the escape codes since the last reset: the style they leave
    combined: dict[str, Style] = {"": base}
    for i, part in enumerate(parts):
        if i % 2:
            if part in ("0", ""):  # a reset: what came before is forgotten
                codes = ""
            else:
                codes += f"\x1b[{part}m"
            continue
        if not part:
            continue
        if "\x1b" in part:
            return None
        style = combined.get(codes)
        if style is None:
            decoded = _decoded(codes)
            style = combined[codes] = base + decoded if decoded else base
        pieces = part.split("\n")
        for j, piece in enumerate(pieces):
            if j:
                rows.append([])
            row = rows[-1]
            room = width - len(row)
            if room > 0 and piece:
                row.extend([ch, style] for ch in piece[:room])
    for row in rows:
        row.extend([" ", base] for _ in range(width - len(row)))
    return rows


def strip_of(cells: list) -> Strip:
    """Cells to a Strip, neighbours of one style in one segment."""
    segments: list[Segment] = []
    run: list[str] = []
    style = None
    for ch, st in cells:
        if st is not style and run:
            segments.append(Segment("".join(run), style))
            run = []
        run.append(ch)
        style = st
    if run:
        segments.append(Segment("".join(run), style))
    return Strip(segments, len(cells))


def draw_chart(
    lines: list[Line],
    width: int,
    height: int,
    palette: Palette,
    *,
    x_kind: str = "step",
    log: bool = False,
    boundaries: Sequence[float] = (),
    cursor: float | None = None,
    alerts: Sequence[float] = (),
    x_choices: list[str] | None = None,
    x_range: tuple[float, ...] = (),
    header: Sequence[Text] = (),
    message: str = "waiting for values",
) -> Drawn:
    """The chart as `height` lines of `width` cells: y labels on the rows their values fall on, the y
    axis, the canvas (grid lines at the labelled ticks, epoch boundaries, the cursor, the series), the
    x axis and its labels under the columns of their values (see `charts.snap_axis`).

    plotext draws the braille lines alone, on a canvas with no frame or ticks, with its limits set so
    that the value of a cell's tick falls in the middle of that cell's four dot rows (two dot columns);
    the axes, labels, grid, epoch lines, cursor and the valid points' marks are drawn here, cell by cell.
    `x_choices`: the x axis is categorical, x = 0, 1, 2 ... evenly spaced and labelled with these words;
    `x_range`: values the x axis spans too, whether or not a point lies there."""
    key = (
        tuple((tuple(ln.xs), tuple(ln.ys), ln.color, ln.marker) for ln in lines),
        width,
        height,
        (palette.background, palette.foreground, palette.grid, palette.epoch, palette.cursor, palette.alert),
        x_kind,
        log,
        tuple(boundaries),
        cursor,
        tuple(alerts),
        tuple(x_choices) if x_choices is not None else None,
        tuple(x_range),
        tuple((t.plain, tuple(t.spans), t.style) for t in header),
        message,
    )
    drawn = _DRAWN.get(key)
    if drawn is None:
        drawn = _draw_chart(
            lines,
            width,
            height,
            palette,
            x_kind=x_kind,
            log=log,
            boundaries=boundaries,
            cursor=cursor,
            alerts=alerts,
            x_choices=x_choices,
            x_range=x_range,
            header=header,
            message=message,
        )
        _DRAWN[key] = drawn
        if len(_DRAWN) > KEEP_DRAWN:
            _DRAWN.popitem(last=False)
    else:
        _DRAWN.move_to_end(key)
    return drawn


# the charts drawn last, by what they were drawn from: Textual lays the screen out and paints it again
# for many reasons (a dialog closed, focus moved, a panel resized and back), and a chart asked for the
# same figure is given the one drawn (a Drawn and its strips are never changed once made)
KEEP_DRAWN = 64
_DRAWN: OrderedDict[tuple[object, ...], Drawn] = OrderedDict()


def _draw_chart(
    lines: list[Line],
    width: int,
    height: int,
    palette: Palette,
    *,
    x_kind: str,
    log: bool,
    boundaries: Sequence[float],
    cursor: float | None,
    alerts: Sequence[float],
    x_choices: list[str] | None,
    x_range: tuple[float, ...],
    header: Sequence[Text],
    message: str,
) -> Drawn:
    bg, fg = palette.background, palette.foreground
    base = Style(color=hex_of(fg), bgcolor=hex_of(bg))
    blank = lambda: [[" ", base] for _ in range(width)]  # noqa: E731
    out: list[list] = []
    for text in list(header)[: max(0, height - 4)]:
        cells = _cells_of(text, width, base)
        out.append(cells)
    top = len(out)
    drawn = [ln for ln in lines if ln.xs]
    if log:
        drawn = [Line(ln.key, ln.xs, [math.log10(y) for y in ln.ys], ln.color, ln.marker) for ln in drawn]
    if not drawn or height - top < 3 or width < 8:
        rows = [blank() for _ in range(height - top)]
        if rows:
            mid = rows[len(rows) // 2]
            start = max(0, (width - len(message)) // 2)
            for i, ch in enumerate(message[:width]):
                mid[start + i][0] = ch
        return Drawn([strip_of(c) for c in out + rows], top=top)
    rows_h = height - top - 2  # the x axis and its labels below
    ys_all = [y for ln in drawn for y in ln.ys]
    y = snap_axis(
        min(ys_all),
        max(ys_all),
        rows_h,
        "log" if log else "",
        min_gap=2 if rows_h >= 7 else 1,
        prefer=max(2.0, (rows_h - 1) / 6),
    )
    label_w = max([len(label) for label in y.labels] + [1])
    cols_w = width - label_w - 1
    xs_all = [x for ln in drawn for x in ln.xs] + list(x_range)
    if x_choices:
        x = choice_axis(x_choices, cols_w)
    else:
        x = snap_axis(
            min(xs_all),
            max(xs_all),
            cols_w,
            x_kind,
            min_gap=3,
            prefer=max(6.0, (cols_w - 1) / 5),
            centre=False,
            label_room=True,
        )
    # the x labels, centred under their columns; one that would touch its neighbour is left out, with its tick
    label_row = blank()
    x_ticks: list[int] = []
    end = -1
    for col, label in zip(x.tick_cells(), x.labels):
        at = label_w + 1 + col
        start = min(max(0, at - len(label) // 2), width - len(label))
        if start <= end or not 0 <= col < cols_w:
            continue
        for i, ch in enumerate(label):
            label_row[start + i][0] = ch
        end = start + len(label)
        x_ticks.append(col)
    y_ticks = {y.cell(t): label for t, label in zip(y.ticks, y.labels)}

    canvas = braille_canvas(drawn, cols_w, rows_h, x, y, base, bg)
    grid_style = Style(color=hex_of(palette.grid), bgcolor=hex_of(bg))
    epoch_style = Style(color=hex_of(palette.epoch), bgcolor=hex_of(bg))
    cursor_style = Style(color=hex_of(palette.cursor), bgcolor=hex_of(bg), bold=True)
    under: dict[tuple[int, int], tuple[str, Style]] = {}  # what shows where the series leave a cell blank
    for r in y_ticks:
        for c in range(cols_w):
            under[(r, c)] = ("─", grid_style)
    for c in x_ticks:
        if c == 0:
            continue  # the y axis stands there
        for r in range(rows_h):
            under[(r, c)] = ("┼" if r in y_ticks else "│", grid_style)
    for b in boundaries:
        c = x.cell(b)
        if 0 <= c < cols_w:
            for r in range(rows_h):
                under[(r, c)] = ("┊", epoch_style)
    if cursor is not None and 0 <= x.cell(cursor) < cols_w:
        for r in range(rows_h):
            under[(r, x.cell(cursor))] = ("┃", cursor_style)
    for (r, c), cell in under.items():
        target = canvas[rows_h - 1 - r][c]
        if target[0] == " ":
            target[0], target[1] = cell
    alert_style = Style(color=hex_of(palette.alert), bgcolor=hex_of(bg), bold=True)
    for a in alerts:  # a health alert's step: a mark on the top row, over whatever is there
        c = x.cell(a)
        if 0 <= c < cols_w:
            canvas[0][c] = ["▼", alert_style]
    for ln in drawn:  # the valid points: a mark each, over the lines
        if ln.marker == "braille":
            continue
        style = Style(color=hex_of(ln.color), bgcolor=hex_of(bg))
        mark = "•" if ln.marker == "dot" else ln.marker
        for px, py in zip(ln.xs, ln.ys):
            c, r = x.cell(px), y.cell(py)
            if 0 <= c < cols_w and 0 <= r < rows_h:
                canvas[rows_h - 1 - r][c] = [mark, style]
    for i, row in enumerate(canvas):
        r = rows_h - 1 - i
        label = y_ticks.get(r, "")
        left = [[ch, base] for ch in label.rjust(label_w)] + [["┤" if r in y_ticks else "│", base]]
        out.append(left + row)
    axis = [[" ", base] for _ in range(label_w)] + [["└", base]]
    axis += [["┬" if c in x_ticks else "─", base] for c in range(cols_w)]
    out.append(axis)
    out.append(label_row)
    return Drawn([strip_of(c) for c in out], x, y, label_w + 1, top)


def choice_axis(choices: list[str], cells: int) -> Axis:
    """A categorical axis over `cells` cells: choice i at x = i, the choices evenly spaced with half a
    space before the first and after the last."""
    k = max(len(choices), 1)
    unit = k / max(cells - 1, 1)
    return Axis(-0.5 + unit / 2, unit, max(cells, 2), tuple(float(i) for i in range(len(choices))), tuple(choices), 1.0)


def blank_figure(width: int, height: int, bg: tuple[int, int, int]):
    """plotext's one global figure, cleared: a frameless canvas of width x height cells in `bg`, no ticks."""
    plt = plotext
    plt.clf()
    plt.limitsize(False, False)
    plt.plotsize(width, height)
    plt.frame(False)
    plt.xticks([])
    plt.yticks([])
    plt.canvas_color(bg)
    plt.axes_color(bg)
    return plt


def braille_canvas(
    lines: list[Line], width: int, height: int, x: Axis, y: Axis, base: Style, bg: tuple[int, int, int]
) -> list[list]:
    """The braille lines on a canvas of width x height cells, drawn by plotext's public module API
    (one global figure, cleared each time), as rows of [char, style] cells, top first."""
    braille = [ln for ln in lines if ln.marker == "braille"]
    if not braille:
        return [[[" ", base] for _ in range(width)] for _ in range(height)]
    plt = blank_figure(width, height, bg)
    # plotext puts value v on dot row floor(0.5 + (4h - 1)(v - lo) / (hi - lo)); with these limits a
    # cell's tick value lands between its 2nd and 3rd dot rows (x: between its two dot columns)
    plt.xlim(x.lo - 0.25 * x.unit, x.lo + (width - 0.75) * x.unit)
    plt.ylim(y.lo - 0.375 * y.unit, y.lo + (height - 0.625) * y.unit)
    for ln in braille:
        xs, ys = thin(ln.xs, ln.ys, width)
        plt.plot(xs, ys, marker="braille", color=ln.color)
    ansi = plt.build()
    rows = ansi_cells(ansi, width, base)
    if rows is None:  # more than plotext's usual codes: rich reads them
        rows = rich_cells(ansi, width, base)
    rows = rows[:height]
    return rows + [[[" ", base] for _ in range(width)] for _ in range(height - len(rows))]


__all__ = [
    "Drawn",
    "Line",
    "Palette",
    "ansi_cells",
    "blank_figure",
    "blend",
    "braille_canvas",
    "choice_axis",
    "draw_chart",
    "hex_of",
    "rgb_of",
    "rich_cells",
    "strip_of",
]
