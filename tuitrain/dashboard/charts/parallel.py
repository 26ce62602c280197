"""How a parallel-coordinates chart is drawn (the sweep's parameters view): one vertical axis per column,
evenly spaced, each named above it and labelled at its ticks; each trial a braille polyline across them
(plotext's, as `draw_chart` draws its lines), its values already normalized to 0 (bottom) .. 1 (top);
marks (the best trial's crossings) over the lines.

Knows nothing of widgets or of sweeps: columns and lines in, strips out. Must not import the run layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from textual.strip import Strip

from tuitrain.dashboard.charts.plan import Axis
from tuitrain.dashboard.charts.drawing import Line, Palette, braille_canvas, hex_of, strip_of


@dataclass(frozen=True)
class Column:
    """One vertical axis: its name, and (position 0..1, label) for each tick it writes."""

    name: str
    ticks: tuple[tuple[float, str], ...] = ()


def draw_parallel(
    columns: list[Column],
    lines: list[Line],
    width: int,
    height: int,
    palette: Palette,
    message: str = "waiting for trials with a value",
) -> list[Strip]:
    """`height` strips of `width` cells: the columns' names on the first row, then the canvas. A line's
    xs are column indexes (0, 1, 2 ...), its ys positions 0..1; its `marker`, when not "braille", is
    also drawn on each crossing of an axis (the best trial's)."""
    bg, fg = palette.background, palette.foreground
    base = Style(color=hex_of(fg), bgcolor=hex_of(bg))
    dim = Style(color=hex_of(palette.grid), bgcolor=hex_of(bg))
    blank = lambda: [[" ", base] for _ in range(width)]  # noqa: E731
    rows = height - 1
    if len(columns) < 2 or rows < 3 or width < 8 * len(columns):
        out = [blank() for _ in range(height)]
        text = message if len(columns) >= 2 else "nothing searched"
        if len(columns) >= 2 and rows >= 1:
            text = "too small for the parallel coordinates"
        mid = out[len(out) // 2] if out else []
        for i, ch in enumerate(text[:width]):
            mid[max(0, (width - len(text)) // 2) + i][0] = ch
        return [strip_of(c) for c in out]
    last_w = max([len(label) for _, label in columns[-1].ticks] + [1])
    left, right = 1, last_w + 2
    n = len(columns) - 1
    at = [left + round(i * (width - left - right - 1) / n) for i in range(n + 1)]
    unit = n / max(at[-1] - at[0], 1)
    x = Axis(-at[0] * unit, unit, width, (), (), 1.0)
    y = Axis(0.0, 1.0 / (rows - 1), rows, (), (), 1.0)
    drawn = [ln for ln in lines if ln.xs]
    canvas = braille_canvas(
        [Line(ln.key, ln.xs, ln.ys, ln.color, "braille") for ln in drawn], width, rows, x, y, base, bg
    )

    def row_of(p: float) -> int:
        return rows - 1 - round(min(max(p, 0.0), 1.0) * (rows - 1))

    for c in at:  # the axes, where no line crosses
        for r in range(rows):
            if canvas[r][c][0] == " " or canvas[r][c][0] == "\u2800":
                canvas[r][c] = ["│", dim]
    for i, (c, column) in enumerate(zip(at, columns)):  # the ticks and their labels, right of the axis
        room = (at[i + 1] - c - 1) if i < n else width - c - 1
        for p, label in column.ticks:
            r = row_of(p)
            canvas[r][c] = ["├", base]
            for j, ch in enumerate(label[: max(room - 1, 0)]):
                canvas[r][c + 1 + j] = [ch, base]
    for ln in drawn:  # the marked trial's crossings, over everything
        if ln.marker == "braille":
            continue
        style = Style(color=hex_of(ln.color), bgcolor=hex_of(bg), bold=True)
        for px, py in zip(ln.xs, ln.ys):
            k = int(px)
            if 0 <= k <= n:
                canvas[row_of(py)][at[k]] = [ln.marker, style]
    names, end = blank(), -1
    bold = Style(color=hex_of(fg), bgcolor=hex_of(bg), bold=True)
    for c, column in zip(at, columns):  # each name centred over its axis, in its share of the row
        name = column.name[: max(at[1] - at[0] - 1, 1)]
        start = min(max(end + 2, c - len(name) // 2), width - len(name))
        for j, ch in enumerate(name):
            if 0 <= start + j < width:
                names[start + j] = [ch, bold]
        end = start + len(name) - 1
    return [strip_of(names)] + [strip_of(row) for row in canvas]


__all__ = ["Column", "draw_parallel"]
