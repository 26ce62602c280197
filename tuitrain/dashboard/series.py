"""Bounded metric series for the plots: min/max-preserving decimation plus an exact recent tail.

A `Series` takes any number of (step, value) points in memory bounded by `capacity`: old points
are merged pairwise into buckets that keep their minimum and maximum, so a spike stays visible
after a million steps. The last `recent` points are kept exactly for the recent-window view.
Must not import textual.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    x_min: float  # x of the minimum
    y_min: float
    x_max: float  # x of the maximum
    y_max: float
    n: int
    total: float  # sum of the values: the bucket's mean, for smoothing
    x_last: float  # x of the newest point

    def merge(self, other: "_Bucket") -> "_Bucket":
        lo = self if self.y_min <= other.y_min else other
        hi = self if self.y_max >= other.y_max else other
        return _Bucket(lo.x_min, lo.y_min, hi.x_max, hi.y_max, self.n + other.n, self.total + other.total,
                       max(self.x_last, other.x_last))


class Series:
    """One metric of one split over global steps."""

    def __init__(self, capacity: int = 1024, recent: int = 400) -> None:
        self.capacity = max(4, capacity)
        self._buckets: list[_Bucket] = []
        self._stride = 1  # raw points per full bucket
        self._open: _Bucket | None = None  # the bucket still filling up
        self._recent: deque[tuple[float, float]] = deque(maxlen=recent)
        self.count = 0  # finite points seen
        self.skipped = 0  # NaN/inf values: counted, not plotted
        self.last: tuple[float, float] | None = None
        self.min: float = math.inf
        self.max: float = -math.inf

    def append(self, x: float, y: float) -> None:
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
        self.min = min(self.min, y)
        self.max = max(self.max, y)
        self._recent.append((x, y))
        b = _Bucket(x, y, x, y, 1, y, x)
        self._open = b if self._open is None else self._open.merge(b)
        if self._open.n >= self._stride:
            self._buckets.append(self._open)
            self._open = None
            if len(self._buckets) >= self.capacity:
                self._halve()

    def _halve(self) -> None:
        """Merge neighbouring buckets: half the points, same extremes."""
        merged = [self._buckets[i].merge(self._buckets[i + 1]) for i in range(0, len(self._buckets) - 1, 2)]
        if len(self._buckets) % 2:
            merged.append(self._buckets[-1])
        self._buckets = merged
        self._stride *= 2

    def __len__(self) -> int:
        return self.count

    def points(self, window: int | None = None) -> tuple[list[float], list[float]]:
        """(xs, ys) in step order: the decimated full history, or the last `window` raw points."""
        if window is not None:
            tail = list(self._recent)[-window:] if window < len(self._recent) else list(self._recent)
            return [p[0] for p in tail], [p[1] for p in tail]
        xs: list[float] = []
        ys: list[float] = []
        buckets = self._buckets + ([self._open] if self._open is not None else [])
        for b in buckets:
            pts = sorted({(b.x_min, b.y_min), (b.x_max, b.y_max)})
            for x, y in pts:
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
        buckets = self._buckets + ([self._open] if self._open is not None else [])
        return ([b.x_last for b in buckets], [b.total / b.n for b in buckets], [b.n for b in buckets])

    def recent_size(self) -> int:
        """Points the recent window shows: the newest quarter of the history (at least 10), at most
        what is kept exactly. A fixed count would show the whole of a short run twice."""
        return min(len(self._recent), max(10, self.count // 4))

    def stored(self) -> int:
        """Points held in memory (for tests of the bound)."""
        return 2 * (len(self._buckets) + (self._open is not None)) + len(self._recent)


class Anchors:
    """A monotone map from global step to another x (wall time, epoch, samples seen), known at the
    steps where events said so and interpolated between them; bounded like a `Series`: past
    `capacity` anchors every other one goes (the map stays monotone, the ends stay exact)."""

    def __init__(self, capacity: int = 2048) -> None:
        self.capacity = max(8, capacity)
        self.steps: list[float] = []
        self.values: list[float] = []

    def __bool__(self) -> bool:
        return bool(self.steps)

    def add(self, step: float, value: float) -> None:
        if not (math.isfinite(step) and math.isfinite(value)):
            return
        if self.steps and step <= self.steps[-1]:
            if step == self.steps[-1]:
                self.values[-1] = max(self.values[-1], value)
            return  # a repeated or older step (validation reports the current one)
        if self.values and value < self.values[-1]:
            value = self.values[-1]  # a resumed run's clock must not run backwards
        self.steps.append(step)
        self.values.append(value)
        if len(self.steps) > self.capacity:
            keep = list(range(0, len(self.steps) - 1, 2)) + [len(self.steps) - 1]
            self.steps = [self.steps[i] for i in keep]
            self.values = [self.values[i] for i in keep]

    def __call__(self, step: float) -> float:
        """The x of a step: interpolated inside, the nearest slope carried on outside."""
        s, v = self.steps, self.values
        if len(s) == 1:
            return v[0]
        i = bisect.bisect_left(s, step)
        i = min(max(i, 1), len(s) - 1)
        s0, s1, v0, v1 = s[i - 1], s[i], v[i - 1], v[i]
        return v0 + (v1 - v0) * (step - s0) / (s1 - s0)

    def map(self, xs: list[float]) -> list[float]:
        return [self(x) for x in xs] if self.steps else list(xs)
