"""`e` on the dashboard: a folder under RUN_DIR/exports/ with every series the charts hold as CSV
(the screen's SVG is written beside them by the app, with Textual's `save_screenshot`). Runs
compared (`tuitrain watch A B`): the folder goes in the first run's directory, with a subfolder of
CSVs for each run and the config keys that differ as config-differences.csv.

A series holds every logged value up to its capacity (1024 points); past that, each bucket's
minimum and maximum, each at its own step (the run's metric files hold everything). A run's logged
media (`write_media`): each histogram as histogram-NAME.csv (a row a step kept: its min, max, mean,
range and counts), and media.csv, the images and texts the dashboard holds (name, step, kind, the file
in the run directory, a text's words); the images themselves are in RUN_DIR/media already. Must not
import textual.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from tuitrain.dashboard.state.compared import compared
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.sinks.metric_files import safe_stem


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
    (epoch, time in seconds since the start, samples seen), then the value."""
    axes = [a for a in state.x_axes() if a != "step"]
    written = []
    for (split, scope, name), series in sorted(state.series.items()):
        if not series.count:
            continue
        path = folder / f"{safe_stem(split)}-{safe_stem(scope)}-{safe_stem(name)}.csv"  # any name: one file each
        xs, ys = series.points()
        with open(path, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["step"] + axes + [name])
            for x, y in zip(xs, ys):
                out.writerow(
                    [int(x) if float(x).is_integer() else x] + [round(state.axes[a](x), 6) for a in axes] + [repr(y)]
                )
        written.append(path)
    return written


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
