"""Bounded metric series for the plots: min/max-preserving decimation plus an exact recent tail.

A `Series` takes any number of (step, value) points in memory bounded by `capacity`: old points
are merged pairwise into buckets that keep their minimum and maximum, so a spike stays visible
after a million steps. The last `recent` points are kept exactly for the recent-window view.
Must not import textual.
"""

from __future__ import annotations

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

    def merge(self, other: "_Bucket") -> "_Bucket":
        lo = self if self.y_min <= other.y_min else other
        hi = self if self.y_max >= other.y_max else other
        return _Bucket(lo.x_min, lo.y_min, hi.x_max, hi.y_max, self.n + other.n)


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
        b = _Bucket(x, y, x, y, 1)
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

    def stored(self) -> int:
        """Points held in memory (for tests of the bound)."""
        return 2 * (len(self._buckets) + (self._open is not None)) + len(self._recent)
