"""What the dashboard holds of a run's samples and distributions: `MediaState`, folded from
`MediaLogged` and `HistogramLogged` events (tuitrain/core/media.py writes the files and says them).

Per name, the images and texts logged (step, kind, path relative to the run directory, a text's
words), thinned as the run's writer thins its files (`core.retention.thin` with the same `keep`), so
an item kept here mostly still has its file; a reader still tolerates one that is gone. Per histogram
name, its columns (one a logged step), at most `2 * columns` of them: past that every other one goes
(the first and the newest stay), so a long run's heatmap spans the whole run at an even density.

Pure Python: no textual. The samples panel and the heatmap charts read it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from tuitrain.core.events import HistogramLogged, MediaLogged
from tuitrain.core.retention import thin
from tuitrain.dashboard.state.changes import Changes, Media, Plot

MEDIA_KEEP = 100  # items kept per name (the run's `log.media_keep` when it says; see `keep_of`)
MAX_KEEP = 1000  # however many files a run keeps (media_keep 0: all), this many in memory
HISTOGRAM_COLUMNS = 300  # a histogram keeps between this many and twice as many columns


@dataclass(frozen=True, slots=True)
class MediaItem:
    """An image or a text as logged: `path` relative to the run directory ("" when none was written)."""

    key: str
    step: int
    kind: str  # "image" or "text"
    path: str
    text: str = ""
    width: int = 0
    height: int = 0
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class HistogramColumn:
    """One step's distribution: `counts` over equal bins from `low` to `high`."""

    step: int
    low: float
    high: float
    counts: tuple
    min: float
    max: float
    mean: float
    epoch: int = 0


class HistogramSeries:
    """A histogram name's columns in step order, bounded (see the module's docstring)."""

    def __init__(self, key: str, limit: int = HISTOGRAM_COLUMNS) -> None:
        self.key = key
        self.limit = max(limit, 2)
        self.columns: list[HistogramColumn] = []
        self.version = 0  # bumped on each change: a chart redraws only then

    def add(self, column: HistogramColumn) -> None:
        cols = self.columns
        if cols and column.step > cols[-1].step:
            cols.append(column)
        else:  # a step again (a resumed run) replaces it; an older one goes in its place
            i = bisect.bisect_left([c.step for c in cols], column.step)
            if i < len(cols) and cols[i].step == column.step:
                cols[i] = column
            else:
                cols.insert(i, column)
        if len(cols) > 2 * self.limit:
            self.columns = cols[:-1:2] + [cols[-1]]
        self.version += 1

    @property
    def latest(self) -> HistogramColumn | None:
        return self.columns[-1] if self.columns else None

    def steps(self) -> list[int]:
        return [c.step for c in self.columns]


def keep_of(config: object) -> int:
    """Items kept per name for a run whose config is `config` (its `[log] media_keep`, 0: all)."""
    log = config.get("log") if isinstance(config, dict) else None
    keep = log.get("media_keep") if isinstance(log, dict) else None
    if type(keep) is not int or keep < 0:
        return MEDIA_KEEP
    return MAX_KEEP if keep == 0 else min(keep, MAX_KEEP)


class MediaState:
    """The samples (`items`: name -> items in step order) and distributions (`histograms`) of a run."""

    def __init__(self, keep: int = MEDIA_KEEP, columns: int = HISTOGRAM_COLUMNS) -> None:
        self.keep = keep
        self.columns = columns
        self.items: dict[str, list[MediaItem]] = {}
        self.histograms: dict[str, HistogramSeries] = {}
        self._steps: list[int] | None = None  # every item's step, once each (None: to be gathered again)
        self.version = 0  # bumped by each new item: the panel redraws only then

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, event: MediaLogged | HistogramLogged) -> Changes:
        """Folds one event in; the kinds of change it made (`Media`: the samples panel, `Plot`: the charts)."""
        if isinstance(event, HistogramLogged):
            series = self.histograms.get(event.key)
            if series is None:
                series = self.histograms[event.key] = HistogramSeries(event.key, self.columns)
            series.add(
                HistogramColumn(
                    event.step,
                    float(event.low),
                    float(event.high),
                    tuple(event.counts),
                    float(event.min),
                    float(event.max),
                    float(event.mean),
                    event.epoch,
                )
            )
            return {Plot}
        if event.kind not in ("image", "text"):
            return set()
        item = MediaItem(
            event.key, event.step, event.kind, event.path, event.text, event.width, event.height, event.epoch
        )
        items = self.items.setdefault(event.key, [])
        if items and item.step > items[-1].step:
            items.append(item)
        else:
            i = bisect.bisect_left([x.step for x in items], item.step)
            if i < len(items) and items[i].step == item.step:
                items[i] = item
            else:
                items.insert(i, item)
        if self.keep and len(items) > self.keep:  # as the writer thins its files
            gone = set(thin([x.step for x in items], self.keep))
            items[:] = [x for x in items if x.step not in gone]
        self._steps = None
        self.version += 1
        return {Media}

    # --- reading ---------------------------------------------------------------------------

    def keys(self) -> list[str]:
        """The names with items, in the order they first came."""
        return list(self.items)

    def steps(self) -> list[int]:
        """Every step some name has an item at, in order: where the step slider stops."""
        if self._steps is None:
            self._steps = sorted({x.step for items in self.items.values() for x in items})
        return self._steps

    def newest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def at(self, key: str, step: int | None = None) -> MediaItem | None:
        """A name's newest item at or before `step` (None: its newest); None when it has none there."""
        items = self.items.get(key) or []
        if not items:
            return None
        if step is None:
            return items[-1]
        i = bisect.bisect_right([x.step for x in items], step) - 1
        return items[i] if i >= 0 else None

    def step_before(self, step: int | None) -> int | None:
        """The slider one stop older than `step` (None: the newest): the logged step before it, or the
        first one when there is none before."""
        steps = self.steps()
        if not steps:
            return None
        at = steps[-1] if step is None else step
        i = bisect.bisect_left(steps, at) - 1
        return steps[max(i, 0)]

    def step_after(self, step: int | None) -> int | None:
        """The slider one stop newer; None once that is the newest (the panel follows new items again)."""
        steps = self.steps()
        if step is None or not steps:
            return None
        i = bisect.bisect_right(steps, step)
        return None if i >= len(steps) - 1 else steps[i]


__all__ = [
    "HISTOGRAM_COLUMNS",
    "MEDIA_KEEP",
    "HistogramColumn",
    "HistogramSeries",
    "MediaItem",
    "MediaState",
    "keep_of",
]
