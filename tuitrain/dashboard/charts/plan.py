"""What a chart shows, as pure functions the chart widget calls: which metrics share a chart, the
grid's shape for a terminal, smoothing, log-scale filtering, thinning to the chart's width, axes
snapped to character cells (`snap_axis`: round ticks in equal steps, each exactly on a row or column)
with their labels, and short numbers. Must not import textual or plotext.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

SMOOTHING = (0.0, 0.6, 0.9, 0.99)  # `s` cycles through these EMA weights; 0: off
MIN_CHART = (36, 12)  # the smallest chart worth drawing (columns, rows, borders included)


def group_metrics(names: list[str]) -> list[tuple[str, list[str]]]:
    """(chart name, its metrics) in the order the names came: one metric a chart, except names that
    differ only by a short prefix before a shared suffix (`g_loss`, `d_loss`: chart `*_loss`)."""
    by_suffix: dict[str, list[str]] = {}
    for name in names:
        prefix, sep, suffix = name.partition("_")
        if sep and suffix and 0 < len(prefix) <= 3:
            by_suffix.setdefault(suffix, []).append(name)
    charts: list[tuple[str, list[str]]] = []
    placed: set[str] = set()
    for name in names:
        if name in placed:
            continue
        suffix = name.partition("_")[2]
        group = by_suffix.get(suffix, []) if "_" in name else []
        if len(group) > 1 and name in group:
            charts.append((f"*_{suffix}", list(group)))
            placed.update(group)
        else:
            charts.append((name, [name]))
            placed.add(name)
    return charts


def grid_shape(count: int, width: int, height: int, min_chart: tuple[int, int] = MIN_CHART) -> tuple[int, int, int]:
    """(columns, rows on screen, row height) for `count` charts in a `width` x `height` area: as many
    as fit at `min_chart` or larger, in the shape whose charts are closest to a chart's usual
    proportions (about 2.5 columns a row), with few empty cells; more charts than fit scroll."""
    cols_fit = max(1, width // min_chart[0])
    rows_fit = max(1, height // min_chart[1])
    count = max(count, 1)
    if count >= cols_fit * rows_fit:
        return cols_fit, rows_fit, max(min_chart[1], height // rows_fit)
    best: tuple[float, int, int] | None = None
    for cols in range(1, cols_fit + 1):
        rows = -(-count // cols)
        if rows > rows_fit:
            continue
        aspect = (width / cols) / (height / rows)
        score = abs(math.log(aspect / 2.5)) + 0.5 * (cols * rows - count) / count
        if best is None or score < best[0]:
            best = (score, cols, rows)
    assert best is not None
    _, cols, rows = best
    return cols, rows, max(min_chart[1], height // rows)


def ema(xs: list[float], ys: list[float], ns: list[int], weight: float) -> tuple[list[float], list[float]]:
    """TensorBoard's smoothing: an exponential moving average with weight `weight` per raw point,
    debiased at the start. A point that stands for n raw points (a bucket's mean) counts n times."""
    out: list[float] = []
    last, norm = 0.0, 0.0
    for y, n in zip(ys, ns):
        w = weight ** max(n, 1)
        last = last * w + (1 - w) * y
        norm = norm * w + (1 - w)
        out.append(last / norm if norm else y)
    return list(xs), out


def finite_for(xs: list[float], ys: list[float], log: bool) -> tuple[list[float], list[float]]:
    """The points a chart can draw: finite, and above zero on a log scale."""
    if log:
        kept = [(x, y) for x, y in zip(xs, ys) if y > 0 and math.isfinite(y) and math.isfinite(x)]
    else:
        kept = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y) and math.isfinite(x)]
    return [p[0] for p in kept], [p[1] for p in kept]


def thin(xs: list[float], ys: list[float], buckets: int) -> tuple[list[float], list[float]]:
    """At most 2 points per bucket (its min and its max, in x order), and the first and last points:
    drawing cost follows the plot's width, not the history's length, a spike stays visible and the
    line spans the whole history."""
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
        for i in sorted({i_min, i_max} | ({0} if b == 0 else set()) | ({n - 1} if b == buckets - 1 else set())):
            out_x.append(xs[i])
            out_y.append(ys[i])
    return out_x, out_y


def short(value: float, digits: int = 4) -> str:
    """A number in few characters that keeps small and large values readable: 0.6931, 12.35,
    3.2e-05, 1.5e+07; integers as they are up to a million."""
    if value is None or not isinstance(value, (int, float)):
        return "-"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    a = abs(value)
    if float(value).is_integer() and a < 1e6:
        return str(int(value))
    if a < 1e-3 or a >= 1e6:
        mantissa, _, exp = f"{value:.{max(digits - 2, 1)}e}".partition("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{exp}"
    decimals = max(0, digits - 1 - math.floor(math.log10(a)))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


NICE = (1, 2, 2.5, 5)  # tick steps: these times a power of ten
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


@dataclass(frozen=True)
class Axis:
    """An axis snapped to character cells: cell i stands for the value `lo + i * unit` (log10 of it on a
    log axis), and every tick is a whole number of cells from `lo`, so each label sits on its value."""

    lo: float
    unit: float  # the value one cell spans
    cells: int
    ticks: tuple[float, ...]  # the labelled values (exponents on a log axis)
    labels: tuple[str, ...]
    step: float  # between neighbouring ticks
    log: bool = False

    @property
    def hi(self) -> float:
        return self.lo + (self.cells - 1) * self.unit

    def position(self, value: float) -> float:
        """Where a value lies, in cells from cell 0 (fractional)."""
        return (value - self.lo) / self.unit

    def cell(self, value: float) -> int:
        return math.floor(self.position(value) + 0.5)

    def value(self, cell: float) -> float:
        return self.lo + cell * self.unit

    def tick_cells(self) -> list[int]:
        return [self.cell(t) for t in self.ticks]


def _decimals(x: float) -> int:
    """Decimal places that write x exactly (x a tick step: 0.25 -> 2, 5 -> 0)."""
    for d in range(0, 16):
        if abs(round(x, d) - x) <= 1e-9 * abs(x):
            return d
    return 16


def _steps(span: float, cells: int, kind: str):
    """Candidate tick steps for a span drawn over `cells` cells, smallest first: 1, 2, 2.5, 5 x 10^k
    (whole ones for counts and decades); on wall time, durations people count in (15 s, 30 min, 6 h,
    2 days)."""
    if kind == "time" and span >= 2:
        yield from (float(s) for s in TIME_STEPS if s >= span / (4 * cells))
        yield from (86400.0 * m * 10**e for e in range(0, 7) for m in (2, 5, 10))
        return
    whole = kind in ("step", "samples", "log")
    first = math.floor(math.log10(span / max(cells - 1, 1))) - 1
    for e in range(first, max(math.floor(math.log10(span)) + 2, 1 if whole else first + 1)):
        for m in NICE:
            s = float(f"{m}e{e}")  # exactly the decimal number, not m * 10.0 ** e
            if whole and (s < 1 or s != int(s)):
                continue
            yield s


def snap_axis(
    lo: float,
    hi: float,
    cells: int,
    kind: str = "",
    *,
    min_gap: int = 1,
    prefer: float = 3.0,
    centre: bool = True,
    label_room: bool = False,
) -> Axis:
    """The axis that shows [lo, hi] over `cells` character cells with ticks at round values in equal
    steps (1, 2, 2.5, 5 x 10^k; decades on a log axis, `kind` "log", lo and hi then being exponents),
    each exactly on a cell: the cell's span is the step divided by a whole number of cells (the gap
    between ticks, at least `min_gap`, near `prefer`), and cell 0 is a multiple of it. Of those, the
    one the data fills most. `label_room`: the gap leaves room for the labels written side by side
    (an x axis). `kind` also picks the labels: "step", "samples", "time", "epoch", "log" or ""."""
    cells = max(int(cells), 2)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    lo, hi = min(lo, hi), max(lo, hi)
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-9 or hi - lo < 1e-200:  # a constant (or float noise): in the middle
        pad = 1.0 if kind == "log" or abs(lo) < 1e-200 else abs(lo) * 0.5
        lo, hi = lo - pad, hi + pad
    span = hi - lo
    if not math.isfinite(span) or span > 1e300:  # beyond what steps can be counted in
        return Axis(lo, span / (cells - 1) if math.isfinite(span) else 1.0, cells, (), (), span)
    gap = max(1, min_gap)
    axis = None
    for _ in range(4):  # widen the gap until the labels fit side by side
        axis = _snap(lo, hi, span, cells, kind, gap, max(prefer, gap), centre)
        if not label_room or not axis.labels:
            return axis
        room = max(len(label) for label in axis.labels) + 2
        gap_now = round(axis.step / axis.unit)
        if gap_now >= room or room > cells - 1:
            return axis
        gap = room
    return axis


def _snap(lo: float, hi: float, span: float, cells: int, kind: str, gap: int, prefer: float, centre: bool) -> Axis:
    best: tuple | None = None
    for s in _steps(span, cells, kind):
        most = min(cells - 1, math.floor(s * (cells - 1) / span + 1e-9))  # more cells a step: too fine a cell
        for k in range(gap, most + 1):
            u = s / k
            start = math.floor(lo / u + 1e-9)
            used = math.ceil(hi / u - 1e-9) - start
            if used > cells - 1:
                continue
            if centre:
                start -= (cells - 1 - used) // 2
            first, last = math.ceil(start / k - 1e-9), math.floor((start + cells - 1) / k + 1e-9)
            ticks = last - first + 1
            fill = span / ((cells - 1) * u)
            score = fill - 0.25 * abs(math.log(k / prefer)) - (2.0 if ticks < 2 else 0.3 if ticks < 3 else 0.0)
            if best is None or score > best[0]:
                best = (score, s, k, start, first, last)
    if best is None:  # fewer cells than ticks need: the ends only
        u = span / (cells - 1)
        return Axis(lo, u, cells, (), (), span)
    _, s, k, start, first, last = best
    u = s / k
    ticks = tuple(_multiple(j, s) for j in range(first, last + 1))
    return Axis(start * u, u, cells, ticks, tuple(axis_labels(list(ticks), s, kind)), s, kind == "log")


def _multiple(j: int, step: float) -> float:
    """j times the step, as the decimal number it is (3 x 0.1 is 0.3, not 0.30000000000000004)."""
    d = _decimals(step)
    return round(j * step, d) if d < 16 else j * step


def axis_labels(ticks: list[float], step: float, kind: str = "") -> list[str]:
    """Labels for ticks `step` apart, with as many digits as tell neighbours apart and no more:
    decades on a log axis (ticks are exponents), durations on wall time, k/M/G for large counts,
    a shared exponent for tiny values."""
    if not ticks:
        return []
    if kind == "log":
        plain = all(-3 <= round(t) <= 3 for t in ticks)  # one style for the whole axis
        return [decade_label(round(t), plain) for t in ticks]
    if kind == "time" and step >= 1 and float(step).is_integer():
        return [duration_label(t, step) for t in ticks]
    big = max(abs(t) for t in ticks)
    suffix, scale = "", 1.0
    if kind in ("step", "samples") or big >= 1e4:
        for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)):  # noqa: B007 - read after the loop
            if (big >= scale * (10 if scale == 1e3 else 1) and step >= scale / 1000) or scale == 1.0:
                break
    elif 0 < big < 1e-3:  # 2.5e-5, 5e-5, 7.5e-5: one exponent, the mantissa's digits from the step
        e = math.floor(math.log10(big))
        d = _decimals(step / 10**e)
        return ["0" if t == 0 else f"{t / 10**e:.{d}f}e{e}" for t in ticks]
    d = _decimals(step / scale)
    unit = "s" if kind == "time" else ""
    labels = [f"{t / scale:.{d}f}" for t in ticks]
    labels = ["0" if float(label) == 0 else label for label in labels]  # never "-0.0"
    if suffix or kind in ("step", "samples", "time"):  # short x labels: 12.5k, 15k
        labels = [_strip(label) for label in labels]
    return [f"{label}{suffix}{unit}" if label != "0" else "0" for label in labels]


def _strip(label: str) -> str:
    return label.rstrip("0").rstrip(".") if "." in label else label


def decade_label(e: int, plain: bool = True) -> str:
    """10^e: plainly (0.001 to 1000), or as 1e-05's shorter 1e-5."""
    if plain:
        return f"{10.0**e:.{max(0, -e)}f}"
    return f"1e{e}"


def duration_label(seconds: float, step: float = 1.0) -> str:
    """A tick on a wall-time axis ticks `step` seconds apart: 45s, 2m, 1m30, 1h, 1h05, 1:00:30, 2d."""
    s = int(round(seconds))
    if step % 86400 == 0:
        return f"{s // 86400}d"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}" if step % 60 else f"{s // 60}m"
    h, m, sec = s // 3600, (s % 3600) // 60, s % 60
    if step % 60:
        return f"{h}:{m:02d}:{sec:02d}"
    return f"{h}h{m:02d}" if step % 3600 else f"{h}h"


def compile_filter(text: str) -> tuple[re.Pattern | None, str]:
    """(the pattern, or None for all charts; an error message when `text` is not a valid regex)."""
    if not text.strip():
        return None, ""
    try:
        return re.compile(text, re.IGNORECASE), ""
    except re.error as e:
        return None, f"not a regular expression: {e}"
