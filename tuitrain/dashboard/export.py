"""`e` on the dashboard: a folder under RUN_DIR/exports/ with every series the charts hold as CSV
(the screen's SVG is written beside them by the app, with Textual's `save_screenshot`). Runs
compared (`tuitrain watch A B`): the folder goes in the first run's directory, with a subfolder of
CSVs for each run and the config keys that differ as config-differences.csv.

The CSVs hold every logged value, live or not: a run of tuitrain's own is read back from its
events.jsonl (`read_back`: the chart's series keep only each bucket's minimum and maximum past 1024
points), each row's epoch, time and samples from that reading's own x axes; what the screen has
that the file does not yet (the last fraction of a second of a live run) follows. A run read from
another tool's log is written as the charts hold it. A run's logged
media (`write_media`): each histogram as histogram-NAME.csv (a row a step kept: its min, max, mean,
range and counts), and media.csv, the images and texts the dashboard holds (name, step, kind, the file
in the run directory, a text's words); the images themselves are in RUN_DIR/media already. Must not
import textual.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tuitrain.core.events import Event
from tuitrain.dashboard.state.compared import compared
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.dashboard.state.series import Anchors, Series
from tuitrain.sinks.metric_files import safe_stem
from tuitrain.sources.events_file import EVENTS_FILE
from tuitrain.sources.run_files import FileSource


def export_folder(run_dir: str | Path, when: float) -> Path:
    """RUN_DIR/exports/YYYYmmdd-HHMMSS, made anew (-2, -3... when one already has that second)."""
    base = Path(run_dir) / "exports"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    folder, n = base / stamp, 1
    while folder.exists():
        n += 1
        folder = base / f"{stamp}-{n}"
    folder.mkdir(parents=True)
    return folder


def write_view(state: DashboardState, folder: Path) -> str:
    """Every series of the view into `folder`: one run's (`write_series`) with its histograms and samples'
    list (`write_media`), or each compared run's in its own subfolder (`write_compared`). What was
    written, in words that follow "the screen" in the notice: ", 2 histograms and 12 series"."""
    if state.kind != "run":  # runs compared: each run's series in its own subfolder
        runs = compared(state).runs
        files = write_compared(runs, compared(state).differences(), folder)
        return f" and {len(files)} series of {len(runs)} runs"
    files = write_series(state, folder)
    media = write_media(state, folder)  # histograms as CSV, and the samples' list
    histograms = sum(p.name.startswith("histogram-") for p in media)
    also = f", {histograms} histogram{'s' if histograms != 1 else ''}" if histograms else ""
    return f"{also} and {len(files)} series"


def write_series(state: DashboardState, folder: Path) -> list[Path]:
    """One CSV a series, named SPLIT-SCOPE-METRIC.csv: step, then the other x axes the run has
    (epoch, time in seconds since the start, samples seen), then the value; every logged value
    where the run's events.jsonl is there to read back (`read_back`)."""
    full = read_back(state)
    source = full or state
    axes = [a for a in source.x_axes() if a != "step"]
    written = []
    for key, series in sorted(_every_series(state, full).items()):
        if not series.count:
            continue
        split, scope, name = key
        path = folder / f"{safe_stem(split)}-{safe_stem(scope)}-{safe_stem(name)}.csv"  # any name: one file each
        xs, ys = series.points()
        steps = np.asarray(xs, dtype=np.float64)
        columns = [[int(x) if x.is_integer() else x for x in map(float, xs)]]
        columns += [np.round(_mapped(source.axes[a], steps), 6).tolist() for a in axes]
        with open(path, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["step"] + axes + [name])
            out.writerows(zip(*columns, map(repr, map(float, ys))))
        written.append(path)
    return written


def _mapped(axis: Anchors, steps: np.ndarray) -> np.ndarray:
    """`axis(step)` of every step at once: interpolated between its anchors, the nearest slope outside."""
    s, v = np.asarray(axis.steps, dtype=np.float64), np.asarray(axis.values, dtype=np.float64)
    if s.size == 1:
        return np.full(steps.shape, v[0])
    i = np.clip(np.searchsorted(s, steps, side="left"), 1, s.size - 1)
    return v[i - 1] + (v[i] - v[i - 1]) * (steps - s[i - 1]) / (s[i] - s[i - 1])


class Kept(Series):
    """Every point given, in order, none left out (a NaN or inf too: it was logged): a series read back
    for the export, where the chart's keeps each bucket's extremes."""

    def __init__(self, capacity: int = 0, recent: int = 0) -> None:
        super().__init__(4, 0)
        self._xs: list[np.ndarray] = []
        self._ys: list[np.ndarray] = []

    def append(self, x: float, y: float) -> None:
        self.extend([x], [y])

    def extend(self, xs, ys) -> None:
        x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        if y.size:
            self._xs.append(x)
            self._ys.append(y)
            self.count += int(y.size)
            self.last = (float(x[-1]), float(y[-1]))

    def points(self, window: int | None = None) -> tuple[list[float], list[float]]:
        if not self._xs:
            return [], []
        return np.concatenate(self._xs).tolist(), np.concatenate(self._ys).tolist()


class ReadBack(DashboardState):
    """A run's state as its events.jsonl gives it, every value kept (`Kept`), its x axes anchored at
    every logged step (no thinning)."""

    series_type = Kept

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock=clock)
        self.axes = {a: Anchors(sys.maxsize) for a in self.axes}


def read_back(state: DashboardState) -> ReadBack | None:
    """`state`'s run read anew from its events.jsonl (in the folder its files are read from: the one
    watched, or the live run's own), every value kept; None for a run read from another tool's log,
    or without that file."""
    where = state.files_dir or (Path(state.run_dir) if state.run_dir else None)
    if state.tool or where is None:
        return None
    try:
        size = (where / EVENTS_FILE).stat().st_size
    except OSError:
        return None
    if not size:
        return None
    full = ReadBack(state.clock)
    source = FileSource(where, until=size)  # what is there now; a live run goes on writing after it

    def fold(event: Event, _state: object) -> None:
        full.apply([event])

    source.open(fold)
    source.work()
    return full if full.series else None


def _every_series(state: DashboardState, full: ReadBack | None) -> dict[tuple[str, str, str], Series]:
    """The series to write: those read back, each followed by what the screen holds past the file's
    newest step (a live run's values not written yet); the screen's own where nothing was read back."""
    if full is None:
        return dict(state.series)
    every: dict[tuple[str, str, str], Series] = dict(full.series)
    for key, series in state.series.items():
        kept = full.series.get(key)
        if kept is None or kept.last is None:
            every.setdefault(key, series)
            continue
        xs, ys = series.points(window=sys.maxsize)  # the newest points, exactly
        after = [(x, y) for x, y in zip(xs, ys) if x > kept.last[0]]
        if after:
            kept.extend([x for x, _ in after], [y for _, y in after])
    return every


def write_media(state: DashboardState, folder: Path) -> list[Path]:
    """The run's histograms, one CSV each (histogram-NAME.csv: step, epoch, min, max, mean, low, high,
    then the count of each bin, bin i from low + i * (high - low) / bins), and media.csv listing its
    images and texts (key, step, epoch, kind, path in the run directory, width, height, text); nothing
    for a run without media."""
    media = state.media
    if media is None:
        return []
    written = []
    for key, series in sorted(media.histograms.items()):
        if not series.columns:
            continue
        path = folder / f"histogram-{safe_stem(key)}.csv"
        bins = max(len(c.counts) for c in series.columns)
        with open(path, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["step", "epoch", "min", "max", "mean", "low", "high"] + [f"bin{i}" for i in range(bins)])
            for c in series.columns:
                out.writerow(
                    [c.step, c.epoch, repr(c.min), repr(c.max), repr(c.mean), repr(c.low), repr(c.high), *c.counts]
                )
        written.append(path)
    if media.items:
        path = folder / "media.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["key", "step", "epoch", "kind", "path", "width", "height", "text"])
            for key, items in media.items.items():
                for x in items:
                    out.writerow([key, x.step, x.epoch, x.kind, x.path, x.width or "", x.height or "", x.text])
        written.append(path)
    return written


def write_compared(
    runs: dict[str, DashboardState], differences: list[tuple[str, list[str]]], folder: Path
) -> list[Path]:
    """Runs compared: each run's series in FOLDER/RUN_NAME/, and config-differences.csv (the config
    key, then each run's value, one column a run)."""
    written = []
    for name, state in runs.items():
        sub = folder / safe_stem(name)
        sub.mkdir()
        written += write_series(state, sub)
    with open(folder / "config-differences.csv", "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["config key", *runs])
        for key, values in differences:
            out.writerow([key, *values])
    return written
