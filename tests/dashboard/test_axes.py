"""Exact axes, read back from the drawn chart: every y label on the row its value falls on, in equal
round steps, distinct; every x label under the column of its value, with its tick (┬) and grid line
there and nowhere else; decades on a log axis. The chart is drawn as the widget draws it
(`drawing.draw_chart`, plotext underneath), then only its text and colours are read."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tuitrain.dashboard.charts.plan import axis_labels, snap_axis
from tuitrain.dashboard.charts.drawing import Line, Palette, draw_chart

from .fixtures import recorded_run
from .test_app import make_app, shown, sync, until
from .test_chart_keys import four_metrics, grid

BG, FG, GRID, EPOCH, TRAIN, VALID, PROBE = (
    (0, 0, 0),
    (200, 200, 200),
    (50, 50, 50),
    (90, 90, 90),
    (60, 150, 230),
    (240, 160, 50),
    (255, 0, 255),
)
PALETTE = Palette(BG, FG, GRID, EPOCH, FG)
NICE = (1.0, 2.0, 2.5, 5.0)


# --- reading a drawn chart back ----------------------------------------------------------------


def cells(strip) -> list[tuple[str, tuple | None]]:
    """(char, its colour as an (r, g, b) triplet) for each cell of a drawn line."""
    out = []
    for seg in strip:
        color = seg.style.color.triplet if seg.style and seg.style.color and seg.style.color.triplet else None
        out += [(ch, tuple(color) if color else None) for ch in seg.text]
    return out


def number(label: str) -> float:
    """A tick label's value: 0.25, -3, 12.5k, 1.5M, 2.5e-5, 1e-7, 45s, 2m, 1m30, 1h05, 1:00:30, 2d."""
    if m := re.fullmatch(r"(\d+):(\d\d):(\d\d)", label):
        return int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
    if m := re.fullmatch(r"(\d+)d", label):
        return int(m[1]) * 86400
    if m := re.fullmatch(r"(\d+)h(\d\d)?", label):
        return int(m[1]) * 3600 + int(m[2] or 0) * 60
    if m := re.fullmatch(r"(\d+)m(\d\d)?", label):
        return int(m[1]) * 60 + int(m[2] or 0)
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)([kMG]?)s?", label)
    assert m, f"not a number label: {label!r}"
    return float(m[1]) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m[2]]


class Read:
    """What a chart shows: its y labels by canvas row (0 at the bottom), x ticks and labels by canvas
    column, its grid rows and columns, and where each colour is drawn."""

    def __init__(self, lines: list[str], colors: list[list] | None = None, top: int = 0) -> None:
        axis_row = len(lines) - 2
        self.left = lines[axis_row].index("└") + 1
        self.rows = axis_row - top
        self.width = len(lines[axis_row]) - self.left
        canvas = [line[self.left :] for line in lines[top:axis_row]][::-1]  # bottom row first
        self.canvas = canvas
        self.colors = [row[self.left :] for row in colors[top:axis_row]][::-1] if colors else None
        self.y: dict[int, str] = {}
        for r, line in enumerate(lines[top:axis_row][::-1]):
            mark, label = line[self.left - 1], line[: self.left - 1].strip()
            assert mark in "┤│", line
            assert (mark == "┤") == bool(label), f"a label without its tick or a tick without its label: {line!r}"
            if label:
                self.y[r] = label
        self.x_ticks = [c for c, ch in enumerate(lines[axis_row][self.left :]) if ch == "┬"]
        self.x: dict[int, str] = {}
        label_line = lines[axis_row + 1]
        for m in re.finditer(r"\S+", label_line):
            inside = [c for c in self.x_ticks if m.start() <= c + self.left < m.end()]
            assert len(inside) == 1, f"label {m[0]!r} at {m.start()} stands under ticks {inside}"
            self.x[inside[0]] = m[0]
        assert sorted(self.x) == self.x_ticks, "a tick without a label"
        # grid lines: rows (columns) drawn in ─ (│) where no series covers them; one a series covers
        # whole is left out of both sides of the comparison
        free = lambda cells: [ch for ch in cells if not (0x2800 <= ord(ch) <= 0x28FF or ch in "•┊┃")]  # noqa: E731
        self.covered_rows = {r for r, row in enumerate(canvas) if not free(row)}
        self.covered_cols = {c for c in range(self.width) if not free([row[c] for row in canvas])}
        self.grid_rows = {
            r for r, row in enumerate(canvas) if free(row) and sum(ch in "─┼" for ch in free(row)) > len(free(row)) / 2
        }
        self.grid_cols = {
            c
            for c in range(self.width)
            if free([row[c] for row in canvas])
            and sum(ch in "│┼" for ch in free([row[c] for row in canvas])) > len(free([row[c] for row in canvas])) / 2
        }

    def grid_at_ticks(self) -> bool:
        """Grid lines at the labelled rows and columns and nowhere else (not at column 0: the y axis)."""
        return (
            self.grid_rows == set(self.y) - self.covered_rows
            and self.grid_cols == set(self.x_ticks) - {0} - self.covered_cols
        )

    def where(self, color: tuple) -> list[tuple[int, int]]:
        """(row, column) of the canvas cells drawn in this colour."""
        return [(r, c) for r, row in enumerate(self.colors) for c, (_, col) in enumerate(row) if col == color]


def read(drawn) -> Read:
    lines = [strip.text for strip in drawn.lines]
    colors = [cells(strip) for strip in drawn.lines]
    return Read(lines, colors, drawn.top)


def steps_of(positions: dict[int, str], log: bool = False) -> tuple[list[int], list[float]]:
    """Tick positions in order and their values (exponents on a log axis)."""
    keys = sorted(positions)
    values = [number(positions[k]) for k in keys]
    if log:
        values = [math.log10(v) for v in values]
    return keys, values


def assert_even(positions: dict[int, str], log: bool = False, kind: str = "") -> tuple[float, float]:
    """Labels distinct, at equal gaps of cells, in equal round steps; returns (value of cell 0, per cell)."""
    labels = list(positions.values())
    assert len(set(labels)) == len(labels), f"labels repeat: {labels}"
    keys, values = steps_of(positions, log)
    assert len(keys) >= 2, f"fewer than two ticks: {positions}"
    gaps = {b - a for a, b in zip(keys, keys[1:])}
    assert len(gaps) == 1, f"ticks at uneven gaps: {keys}"
    step = (values[-1] - values[0]) / (len(values) - 1)
    for a, b in zip(values, values[1:]):
        assert b - a == pytest.approx(step, rel=1e-4), f"uneven steps: {labels}"
    if log:
        assert step == round(step) and all(v == round(v) for v in values), f"not decades: {labels}"
    elif kind != "time":
        mantissa = step / 10 ** math.floor(math.log10(step) + 1e-6)
        assert any(mantissa == pytest.approx(m, rel=1e-4) for m in NICE), f"step {step} is not 1, 2, 2.5 or 5 x 10^k"
    per_cell = step / gaps.pop()
    return values[0] - keys[0] * per_cell, per_cell


def chart(train_y, xs, width, height, *, log=False, kind="step", probes=(), valid=None, boundaries=()):
    lines = [Line("train", list(xs), list(train_y), TRAIN, "braille")]
    if valid:
        lines.append(Line("valid", valid[0], valid[1], VALID, "dot", "•"))
    for i, v in enumerate(probes):  # flat lines at given values, to see which row draws them
        lines.append(Line(f"probe{i}", [xs[0], xs[-1]], [v, v], PROBE, "braille"))
    return draw_chart(lines, width, height, PALETTE, x_kind=kind, log=log, boundaries=list(boundaries))


# --- property tests over random data and sizes ---------------------------------------------------


@st.composite
def data(draw, log: bool = False):
    n = draw(st.integers(1, 80))
    if log:
        lo = 10 ** draw(st.floats(-9, 6))
        hi = lo * 10 ** draw(st.floats(0, 9))
    else:
        e = draw(st.integers(-9, 8))
        lo = draw(st.floats(-1000, 1000)) * 10.0**e
        hi = lo + draw(st.floats(0, 100)) * 10.0 ** draw(st.integers(e - 4, e))
    ys = [draw(st.floats(lo, hi)) if hi > lo else lo for _ in range(n)]
    ys[draw(st.integers(0, n - 1))] = lo
    ys[draw(st.integers(0, n - 1))] = hi
    first = draw(st.integers(0, 10 ** draw(st.integers(0, 7))))
    every = draw(st.integers(1, 10 ** draw(st.integers(0, 4))))
    xs = [first + i * every for i in range(n)]
    return xs, ys


SIZES = st.tuples(st.integers(24, 200), st.integers(6, 60))


def check_chart(xs, ys, width, height, log=False, kind="step"):
    drawn = chart(ys, xs, width, height, log=log, kind=kind)
    got = read(drawn)
    assert got.rows == height - 2 and got.width == width - got.left
    # y: labels on their rows
    lo, per_row = assert_even(got.y, log)
    value = (lambda v: math.log10(v)) if log else (lambda v: v)
    drawn_rows = sorted({r for r, _ in got.where(TRAIN)})
    assert drawn_rows, "the series is not drawn"
    for row, v in ((drawn_rows[-1], max(ys)), (drawn_rows[0], min(ys))):
        assert abs(lo + row * per_row - value(v)) <= 0.5 * per_row * (1 + 1e-9) + 1e-12 * abs(value(v)), (
            f"{v} drawn on row {row}, which stands for {lo + row * per_row}"
        )
    # x: labels under their columns, grid lines at the labelled ticks only (not at column 0: the y axis)
    x0, per_col = assert_even(got.x, kind=kind)
    assert got.grid_at_ticks(), (got.grid_rows, got.y, got.grid_cols, got.x_ticks)
    cols = sorted({c for _, c in got.where(TRAIN)})
    for col, x in ((cols[0], xs[0]), (cols[-1], xs[-1])):
        assert abs(x0 + col * per_col - x) <= 0.5 * per_col * (1 + 1e-9), (
            f"x {x} drawn at column {col}, which stands for {x0 + col * per_col}"
        )
    # the probes: a line at each labelled value inside the data's range lies on that label's row
    inside = {row: label for row, label in got.y.items() if min(ys) <= number(label) <= max(ys)}
    again = read(chart(ys, xs, width, height, log=log, kind=kind, probes=[number(v) for v in inside.values()]))
    assert again.y == got.y and again.x == got.x  # values inside the range change no axis
    for row, label in inside.items():
        rows = {r for r, c in again.where(PROBE) if 0 < c < again.width - 1}
        assert row in rows, f"the line at {label} is not drawn on its row {row} (drawn on {sorted(rows)})"


@settings(derandomize=True, max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data(), SIZES)
def test_linear_axes_put_each_label_on_its_value(points, size):
    xs, ys = points
    check_chart(xs, ys, *size)


@settings(derandomize=True, max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data(log=True), SIZES)
def test_log_axes_label_decades_on_their_rows(points, size):
    xs, ys = points
    check_chart(xs, ys, *size, log=True)


@settings(derandomize=True, max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data(), SIZES, st.sampled_from(["epoch", "time", "samples"]), st.floats(0.01, 1000))
def test_other_x_axes_label_their_columns(points, size, kind, scale):
    xs, ys = points
    check_chart([x * scale / 7 for x in xs] if kind != "samples" else [x * 32 for x in xs], ys, *size, kind=kind)


@settings(derandomize=True, max_examples=200, deadline=None, database=None)
@given(
    st.floats(-1e9, 1e9),
    st.floats(0, 1),
    st.integers(-12, 9),
    st.integers(2, 60),
    st.sampled_from(["", "step", "samples", "epoch", "time", "log"]),
)
def test_snapped_ticks_fall_on_whole_cells_and_labels_differ(lo, frac, e, cells, kind):
    if kind == "log":
        lo, span = lo / 1e8, frac * 20
    else:
        span = frac * 10.0**e
    assume(math.isfinite(lo + span))
    axis = snap_axis(lo, lo + span, cells, kind)
    # within float noise: snap_axis forgives 1e-9 of a cell (-1e-8 on an axis of 20-decade cells is 0)
    noise = 1e-9 * max(1.0, abs(lo), abs(lo + span), axis.unit)
    assert axis.lo <= lo + noise and axis.hi >= lo + span - noise
    for t in axis.ticks:
        assert axis.position(t) == pytest.approx(round(axis.position(t)), abs=1e-3)
        assert 0 <= round(axis.position(t)) < cells
    assert len(set(axis.labels)) == len(axis.labels)


def test_labels_carry_the_digits_their_step_needs():
    assert axis_labels([0.5, 0.75, 1.0], 0.25) == ["0.50", "0.75", "1.00"]
    assert axis_labels([100000.0, 100000.25, 100000.5], 0.25) == ["100000.00", "100000.25", "100000.50"]
    assert axis_labels([1000000.0, 1002500.0, 1005000.0], 2500, "step") == ["1M", "1.0025M", "1.005M"]
    assert axis_labels([2.5e-05, 5e-05, 7.5e-05], 2.5e-05) == ["2.5e-5", "5.0e-5", "7.5e-5"]
    assert axis_labels([-3.0, -2.0, -1.0, 0.0], 1.0, "log") == ["0.001", "0.01", "0.1", "1"]
    assert axis_labels([-7.0, -5.0, -3.0], 2.0, "log") == ["1e-7", "1e-5", "1e-3"]
    assert axis_labels([3600.0, 3630.0, 3660.0], 30.0, "time") == ["1:00:00", "1:00:30", "1:01:00"]
    assert axis_labels([60.0, 90.0, 120.0], 30.0, "time") == ["1m00", "1m30", "2m00"]
    assert axis_labels([0.0, 0.5, 1.0], 0.5, "time") == ["0", "0.5s", "1s"]


def test_a_constant_is_labelled_on_its_row():
    got = read(chart([0.003] * 20, list(range(1, 21)), 40, 14))
    lo, per_row = assert_even(got.y)
    rows = {r for r, _ in got.where(TRAIN)}
    assert len(rows) == 1 and got.y[rows.pop()] == "0.003"


def test_valid_points_are_marked_on_their_rows_and_epoch_lines_are_not_grid_lines():
    xs = list(range(1, 101))
    ys = [2 / (1 + x / 10) for x in xs]
    vx, vy = [25, 50, 75, 100], [0.8, 0.5, 0.4, 0.33]
    got = read(chart(ys, xs, 60, 20, valid=(vx, vy), boundaries=[25, 50, 75]))
    lo, per_row = assert_even(got.y)
    x0, per_col = assert_even(got.x)
    marks = got.where(VALID)
    assert len(marks) == 4
    for (r, c), x, y in zip(sorted(marks, key=lambda m: m[1]), vx, vy):
        assert abs(lo + r * per_row - y) <= per_row / 2 and abs(x0 + c * per_col - x) <= per_col / 2
    epoch_cols = {c for r, c in got.where(EPOCH)}
    assert epoch_cols and all(got.canvas[r][c] == "┊" for r, c in got.where(EPOCH))
    assert got.grid_at_ticks()


def test_an_empty_chart_says_it_waits():
    drawn = draw_chart([], 40, 12, PALETTE)
    assert any("waiting for values" in s.text for s in drawn.lines) and len(drawn.lines) == 12


# --- the widget, on the dashboard --------------------------------------------------------------


def read_widget(chart) -> Read:
    """A chart on screen, its border taken off."""
    lines = [line[1:-1] for line in shown(chart).split("\n")[1:-1]]
    return Read(lines)


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (200, 60)])
@sync
async def test_every_chart_on_the_dashboard_has_exact_axes(size):
    app = make_app(recorded_run(epochs=3, total_epochs=5, end="running") + four_metrics()[1:])
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: grid(app).charts and all(c.points for c in grid(app).charts.values()))
        await pilot.pause()
        checked = 0
        for chart in grid(app).visible():
            if not app.screen.region.contains_region(chart.region) or chart.size.height < 6:
                continue
            got = read_widget(chart)
            assert_even(got.y)
            assert_even(got.x)
            assert got.grid_at_ticks()
            checked += 1
        assert checked >= 1
        loss = grid(app).charts["loss"]
        loss.focus()
        await pilot.press("l")  # log: decades
        await pilot.pause()
        got = read_widget(loss)
        assert_even(got.y, log=True)
        assert all(re.fullmatch(r"0\.0*1|1|10*|1e-?\d+", label) for label in got.y.values())
