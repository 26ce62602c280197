"""What a chart shows, as pure functions the chart widget calls: which metrics share a chart, the
grid's shape for a terminal, smoothing, log-scale filtering, thinning to the chart's width, tick
positions and short number labels. Must not import textual or plotext.
"""

from __future__ import annotations

import math
import re

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


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round tick positions (1, 2, 2.5, 5 times a power of ten) inside [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, float(round(step)))
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(round(t, 12))
        t += step
    return ticks or [lo]


def log_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Tick positions for a log axis between lo > 0 and hi: powers of ten, with 2 and 5 between
    them when the range is less than a few decades."""
    if lo <= 0 or hi <= 0 or not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for mults in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        ticks = [m * 10 ** e for e in range(a, b + 1) for m in mults if lo <= m * 10 ** e <= hi]
        if len(ticks) >= min(count, 3):
            break
    if len(ticks) < 2:  # less than a decade: round linear positions, still in order on a log axis
        return nice_ticks(lo, hi, count)
    if len(ticks) > count + 1:  # many decades: every k-th
        every = -(-len(ticks) // count)
        ticks = ticks[::every]
    return ticks


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


def tick_labels(ticks: list[float], axis: str = "") -> list[str]:
    """Labels for tick positions: as short as `short` makes them, durations for wall time, k/M for
    large counts."""
    if axis == "time":
        return [duration_label(t) for t in ticks]
    if axis in ("step", "samples") or (ticks and max(abs(t) for t in ticks) >= 1e4):
        return [count_label(t) for t in ticks]
    return [short(t, 3) for t in ticks]


def count_label(n: float) -> str:
    if abs(n) >= 1e9:
        return f"{n / 1e9:.3g}G"
    if abs(n) >= 1e6:
        return f"{n / 1e6:.3g}M"
    if abs(n) >= 1e4:
        return f"{n / 1e3:.3g}k"
    return short(n, 4)


def duration_label(seconds: float) -> str:
    s = int(round(max(seconds, 0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}" if s % 60 else f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}"


def compile_filter(text: str) -> tuple[re.Pattern | None, str]:
    """(the pattern, or None for all charts; an error message when `text` is not a valid regex)."""
    if not text.strip():
        return None, ""
    try:
        return re.compile(text, re.IGNORECASE), ""
    except re.error as e:
        return None, f"not a regular expression: {e}"
