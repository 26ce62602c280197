"""Bounded metric series for the plots: min/max-preserving decimation plus an exact recent tail.

A `Series` takes any number of (step, value) points in memory bounded by `capacity`: points are
gathered into buckets of `stride` points that keep their minimum and maximum (and where they lie),
and when `capacity` buckets are full, neighbours merge pairwise and the stride doubles, so a spike
stays visible after a million steps. The last `recent` points are kept exactly for the
recent-window view. `append` takes one point; `extend` takes many at once with numpy (a file read
back): the same buckets, without a Python step per point. What `extend` gets waits in arrays until
it is read or FOLD_AT points wait (count, last, min and max are kept at once), so a file's thousand
small blocks are bucketed as a few big ones. Must not import textual.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

import numpy as np

# a bucket's columns: x of its minimum, the minimum, x of its maximum, the maximum, points, their sum,
# x of its newest point
_COLUMNS = ("x_min", "y_min", "x_max", "y_max", "n", "total", "x_last")
FOLD_AT = 1 << 16  # points `extend` may hold before bucketing them (2 x 8 bytes each)


class Waiting:
    """Pairs of arrays handed over by `extend`, held until they are read or FOLD_AT points wait, then
    taken as one pair: a file's thousand small blocks are folded as a few big ones."""

    __slots__ = ("_parts", "size")

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.size = 0

    def __bool__(self) -> bool:
        return bool(self._parts)

    def add(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Hold (a, b); True once FOLD_AT points wait (time to fold)."""
        self._parts.append((a, b))
        self.size += int(a.size)
        return self.size >= FOLD_AT

    def take(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Everything held, as one pair (None: nothing), and hold nothing."""
        parts, self._parts, self.size = self._parts, [], 0
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class Series:
    """One metric of one split over global steps."""

    def __init__(self, capacity: int = 1024, recent: int = 400) -> None:
        self.capacity = max(4, capacity)
        # the full buckets, one list per column (see _COLUMNS), oldest first
        self._cols: tuple[list[float], ...] = tuple([] for _ in _COLUMNS)
        self._stride = 1  # raw points per full bucket
        self._open: list[float] | None = None  # the bucket still filling up, as a row of _COLUMNS
        self._recent: deque[tuple[float, float]] = deque(maxlen=recent)
        self.count = 0  # finite points seen
        self.skipped = 0  # NaN/inf values: counted, not plotted
        self.last: tuple[float, float] | None = None
        self.min: float = math.inf
        self.max: float = -math.inf
        self._waiting = Waiting()  # extend's finite points, not bucketed yet

    # --- taking points ---------------------------------------------------------------------

    def append(self, x: float, y: float) -> None:
        if self._waiting:
            self._fold()
        try:
            y = float(y)
        except (TypeError, ValueError):
            self.skipped += 1
            return
        if math.isnan(y) or math.isinf(y):
            self.skipped += 1
            return
        x = float(x)
        self.count += 1
        self.last = (x, y)
        if y < self.min:
            self.min = y
        if y > self.max:
            self.max = y
        self._recent.append((x, y))
        b = self._open
        if b is None:
            b = self._open = [x, y, x, y, 1, y, x]
        else:
            if y < b[1]:  # a tie keeps the older point, as np.argmin does
                b[0], b[1] = x, y
            if y > b[3]:
                b[2], b[3] = x, y
            b[4] += 1
            b[5] += y
            if x > b[6]:
                b[6] = x
        if b[4] >= self._stride:
            self._close_open()

    def extend(self, xs, ys) -> None:
        """Many points at once, in order: what `append` of each would keep, with numpy."""
        x = np.asarray(xs, dtype=np.float64)
        y = np.asarray(ys, dtype=np.float64)
        lo, hi = float(y.min(initial=math.inf)), float(y.max(initial=-math.inf))
        if not (math.isfinite(lo) and math.isfinite(hi)):  # (NaN makes both NaN)
            finite = np.isfinite(y)
            self.skipped += int(y.size - np.count_nonzero(finite))
            x, y = x[finite], y[finite]
            lo, hi = float(y.min(initial=math.inf)), float(y.max(initial=-math.inf))
        if not y.size:
            return
        self.count += int(y.size)
        self.last = (float(x[-1]), float(y[-1]))
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)
        if self._waiting.add(x, y):
            self._fold()

    def _fold(self) -> None:
        """Bucket the points `extend` left waiting."""
        waiting = self._waiting.take()
        if waiting is None:
            return
        x, y = waiting
        tail = max(self._recent.maxlen or 0, 0)
        self._recent.extend(zip(x[-tail:].tolist(), y[-tail:].tolist()) if tail else ())
        i = 0
        while i < y.size:
            if self._open is not None:  # fill the open bucket first, one point at a time (fewer than a stride)
                need = self._stride - int(self._open[4])
                take = min(need, y.size - i)
                if take < 8:
                    for xv, yv in zip(x[i : i + take].tolist(), y[i : i + take].tolist()):
                        self._add_to_open(xv, yv)
                else:
                    self._add_to_open_many(x[i : i + take], y[i : i + take])
                i += take
                if self._open is not None and self._open[4] >= self._stride:
                    self._close_open()
                continue
            room = self.capacity - len(self._cols[0])  # whole buckets before the next halving
            whole = min(room, (y.size - i) // self._stride)
            if whole > 0:
                end = i + whole * self._stride
                self._add_buckets(x[i:end].reshape(whole, self._stride), y[i:end].reshape(whole, self._stride))
                i = end
                if len(self._cols[0]) >= self.capacity:
                    self._halve()
                continue
            self._open = None
            self._add_to_open_many(x[i:], y[i:])  # fewer than a stride left: the new open bucket
            i = y.size

    def _add_to_open(self, x: float, y: float) -> None:
        b = self._open
        if b is None:
            self._open = [x, y, x, y, 1, y, x]
            return
        if y < b[1]:
            b[0], b[1] = x, y
        if y > b[3]:
            b[2], b[3] = x, y
        b[4] += 1
        b[5] += y
        if x > b[6]:
            b[6] = x

    def _add_to_open_many(self, x: np.ndarray, y: np.ndarray) -> None:
        lo, hi = int(np.argmin(y)), int(np.argmax(y))
        row = [float(x[lo]), float(y[lo]), float(x[hi]), float(y[hi]), int(y.size), float(y.sum()), float(x.max())]
        b = self._open
        if b is None:
            self._open = row
            return
        if row[1] < b[1]:
            b[0], b[1] = row[0], row[1]
        if row[3] > b[3]:
            b[2], b[3] = row[2], row[3]
        b[4] += row[4]
        b[5] += row[5]
        b[6] = max(b[6], row[6])

    def _close_open(self) -> None:
        for col, v in zip(self._cols, self._open):
            col.append(v)
        self._open = None
        if len(self._cols[0]) >= self.capacity:
            self._halve()

    def _add_buckets(self, x: np.ndarray, y: np.ndarray) -> None:
        """Whole buckets from (buckets, stride) arrays of points."""
        rows = np.arange(y.shape[0])
        lo, hi = np.argmin(y, axis=1), np.argmax(y, axis=1)
        new = (
            x[rows, lo],
            y[rows, lo],
            x[rows, hi],
            y[rows, hi],
            np.full(y.shape[0], y.shape[1]),
            y.sum(axis=1),
            x.max(axis=1),
        )
        for col, values in zip(self._cols, new):
            col.extend(values.tolist())

    def _halve(self) -> None:
        """Merge neighbouring buckets: half the points, same extremes."""
        n = len(self._cols[0])
        pairs = n // 2
        x_min, y_min, x_max, y_max, cnt, total, x_last = (
            np.asarray(c[: 2 * pairs], dtype=np.float64).reshape(pairs, 2) for c in self._cols
        )
        rows = np.arange(pairs)
        lo = np.where(y_min[:, 0] <= y_min[:, 1], 0, 1)  # a tie keeps the older bucket's point
        hi = np.where(y_max[:, 0] >= y_max[:, 1], 0, 1)
        merged = (
            x_min[rows, lo],
            y_min[rows, lo],
            x_max[rows, hi],
            y_max[rows, hi],
            cnt.sum(axis=1),
            total.sum(axis=1),
            x_last.max(axis=1),
        )
        odd = [c[-1] for c in self._cols] if n % 2 else None
        self._cols = tuple(m.tolist() for m in merged)
        self._cols[4][:] = [int(v) for v in self._cols[4]]
        if odd is not None:
            for col, v in zip(self._cols, odd):
                col.append(v)
        self._stride *= 2

    # --- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.count

    def _rows(self) -> list:
        self._fold()
        rows = list(zip(*self._cols))
        if self._open is not None:
            rows.append(tuple(self._open))
        return rows

    def points(self, window: int | None = None) -> tuple[list[float], list[float]]:
        """(xs, ys) in step order: the decimated full history, or the last `window` raw points."""
        self._fold()
        if window is not None:
            tail = list(self._recent)[-window:] if window < len(self._recent) else list(self._recent)
            return [p[0] for p in tail], [p[1] for p in tail]
        xs: list[float] = []
        ys: list[float] = []
        for x_min, y_min, x_max, y_max, *_ in self._rows():
            if x_min == x_max and y_min == y_max:
                xs.append(x_min)
                ys.append(y_min)
                continue
            for x, y in sorted(((x_min, y_min), (x_max, y_max))):
                xs.append(x)
                ys.append(y)
        if self.last is not None and (not xs or xs[-1] != self.last[0]):
            xs.append(self.last[0])  # the newest value is always drawn exactly
            ys.append(self.last[1])
        return xs, ys

    def means(self, window: int | None = None) -> tuple[list[float], list[float], list[int]]:
        """(xs, means, counts): each bucket's mean at its newest x and how many raw points it holds
        (the recent window: raw points, count 1). What smoothing works on: an EMA over a bucket of
        n points of mean m is the EMA over n points of m, whatever their order."""
        if window is not None:
            xs, ys = self.points(window)
            return xs, ys, [1] * len(xs)
        rows = self._rows()
        return ([r[6] for r in rows], [r[5] / r[4] for r in rows], [int(r[4]) for r in rows])

    def recent_size(self) -> int:
        """Points the recent window shows: the newest quarter of the history (at least 10), at most
        what is kept exactly. A fixed count would show the whole of a short run twice."""
        self._fold()
        return min(len(self._recent), max(10, self.count // 4))

    def stored(self) -> int:
        """Points held in memory (for tests of the bound)."""
        self._fold()
        return 2 * (len(self._cols[0]) + (self._open is not None)) + len(self._recent)


class Anchors:
    """A monotone map from global step to another x (wall time, epoch, samples seen), known at the
    steps where events said so and interpolated between them; bounded like a `Series`: past
    `capacity` anchors every other one goes (the map stays monotone, the ends stay exact). What
    `extend` gets waits until the map is read or FOLD_AT anchors wait."""

    def __init__(self, capacity: int = 2048) -> None:
        self.capacity = max(8, capacity)
        self._steps: list[float] = []
        self._values: list[float] = []
        self._waiting = Waiting()

    @property
    def steps(self) -> list[float]:
        self._fold()
        return self._steps

    @steps.setter
    def steps(self, steps: list[float]) -> None:
        self._steps = steps

    @property
    def values(self) -> list[float]:
        self._fold()
        return self._values

    @values.setter
    def values(self, values: list[float]) -> None:
        self._values = values

    def __bool__(self) -> bool:
        return bool(self.steps)

    def add(self, step: float, value: float) -> None:
        if self._waiting:
            self._fold()
        if not (math.isfinite(step) and math.isfinite(value)):
            return
        steps, values = self._steps, self._values
        if steps and step <= steps[-1]:
            if step == steps[-1]:
                values[-1] = max(values[-1], value)
            return  # a repeated or older step (validation reports the current one)
        if values and value < values[-1]:
            value = values[-1]  # a resumed run's clock must not run backwards
        steps.append(step)
        values.append(value)
        if len(steps) > self.capacity:
            keep = list(range(0, len(steps) - 1, 2)) + [len(steps) - 1]
            self._steps = [steps[i] for i in keep]
            self._values = [values[i] for i in keep]

    def __call__(self, step: float) -> float:
        """The x of a step: interpolated inside, the nearest slope carried on outside."""
        if self._waiting:
            self._fold()
        s, v = self._steps, self._values
        if len(s) == 1:
            return v[0]
        i = bisect.bisect_left(s, step)
        i = min(max(i, 1), len(s) - 1)
        s0, s1, v0, v1 = s[i - 1], s[i], v[i - 1], v[i]
        return v0 + (v1 - v0) * (step - s0) / (s1 - s0)

    def map(self, xs: list[float]) -> list[float]:
        return [self(x) for x in xs] if self.steps else list(xs)

    def extend(self, steps, values) -> None:
        """Many anchors at once, in step order: what `add` of each would keep, give or take which
        ones a long map thins away."""
        s = np.asarray(steps, dtype=np.float64)
        v = np.asarray(values, dtype=np.float64)
        if s.size and self._waiting.add(s, v):
            self._fold()

    def _fold(self) -> None:
        waiting = self._waiting.take()
        if waiting is None:
            return
        s, v = waiting
        ok = np.isfinite(s) & np.isfinite(v)
        s, v = s[ok], v[ok]
        if not s.size:
            return
        last_step = self._steps[-1] if self._steps else -math.inf
        before = np.maximum.accumulate(np.concatenate(([last_step], s)))[:-1]  # the newest step before each
        new = s > before
        same = s == before  # a repeated step raises the value at that step
        group = np.cumsum(new) - 1  # which new anchor each point belongs to (-1: the last one kept)
        if self._steps:
            old = v[same & (group < 0)]
            if old.size:
                self._values[-1] = max(self._values[-1], float(old.max()))
        kept = s[new]
        if not kept.size:
            return
        if kept.size == s.size:  # every step new (the common case): each anchor its own value
            top = v.copy()
        else:  # the highest value of each new step's run of repeats (runs are contiguous: group ascends)
            starts = np.flatnonzero(new)
            top = np.maximum.reduceat(np.where(new | same, v, -np.inf), starts)
        floor = self.values[-1] if self.values else -np.inf
        top = np.maximum.accumulate(np.maximum(top, floor))  # a resumed run's clock must not run backwards
        steps = np.concatenate((np.asarray(self._steps, dtype=np.float64), kept))
        values = np.concatenate((np.asarray(self._values, dtype=np.float64), top))
        while steps.size > self.capacity:  # every other one goes, as in `add`; the ends stay
            steps = np.concatenate((steps[0:-1:2], steps[-1:]))
            values = np.concatenate((values[0:-1:2], values[-1:]))
        self._steps, self._values = steps.tolist(), values.tolist()
