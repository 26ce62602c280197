"""Pictures drawn in character cells: a logged image read from its PNG file and scaled to a box of
cells (`fit`, `scaled`), drawn as coloured half-blocks (`halfblocks`: "▀" with the upper pixel as its
colour and the lower one as its background, so a cell holds two square-ish pixels); and a heatmap's
shades (`heat_columns`: a histogram's counts over the rows of an axis, one canvas column a step).

Images are read with Pillow when it is installed, else with the core's own PNG reader
(`core.png.read_png`, fast for the files tuitrain writes). Knows nothing of widgets or of the run.
Must not import the run layer.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from pathlib import Path

import numpy as np
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from tuitrain.core.png import read_png

CACHE = 16  # images kept decoded (a key's newest and the steps the slider passed)
_images: OrderedDict = OrderedDict()


def read_image(path: Path) -> np.ndarray | None:
    """The image at `path` as an (H, W, 3) uint8 array; None when it is gone (thinned away, a run
    without files) or cannot be read. The newest few are kept, by path, size and modification time."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _images:
        _images.move_to_end(key)
        return _images[key]
    pixels = _decode(path)
    if pixels is not None:
        _images[key] = pixels
        while len(_images) > CACHE:
            _images.popitem(last=False)
    return pixels


def _decode(path: Path) -> np.ndarray | None:
    try:
        from PIL import Image
    except ImportError:
        Image = None
    try:
        if Image is not None:
            with Image.open(path) as img:
                return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
        w, h, rgb = read_png(path.read_bytes())
        return np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3)
    except (OSError, ValueError, SyntaxError):  # PngError is a ValueError; SyntaxError: Pillow's damaged file
        return None


def fit(width: int, height: int, cols: int, rows: int) -> tuple[int, int]:
    """(pixels across, pixels down) that a `width` x `height` image takes in `cols` x `rows` cells of
    half-blocks (two pixels a cell, one above the other), its shape kept: smaller when it is larger,
    a whole number of times larger when it is small (pixels stay even)."""
    if width <= 0 or height <= 0 or cols <= 0 or rows <= 0:
        return 0, 0
    scale = min(cols / width, 2 * rows / height)
    if scale >= 1:
        k = int(scale)
        return width * k, height * k
    return max(1, min(cols, round(width * scale))), max(1, min(2 * rows, round(height * scale)))


def scaled(pixels: np.ndarray, tw: int, th: int) -> np.ndarray:
    """`pixels` (H, W, 3) as (th, tw, 3): each new pixel the mean of those it covers (smaller), or
    each pixel repeated (a whole number of times larger)."""
    h, w = pixels.shape[:2]
    if (tw, th) == (w, h):
        return pixels
    if tw >= w and th >= h:
        return np.repeat(np.repeat(pixels, max(th // h, 1), axis=0), max(tw // w, 1), axis=1)[:th, :tw]
    sums = np.zeros((h + 1, w + 1, 3), dtype=np.int64)
    sums[1:, 1:] = pixels.astype(np.int64).cumsum(0).cumsum(1)
    ys = np.floor(np.linspace(0, h, th + 1)).astype(int)
    xs = np.floor(np.linspace(0, w, tw + 1)).astype(int)
    ys[1:] = np.maximum(ys[1:], ys[:-1] + 1).clip(max=h)  # at least one pixel each
    xs[1:] = np.maximum(xs[1:], xs[:-1] + 1).clip(max=w)
    y0, y1, x0, x1 = ys[:-1], ys[1:], xs[:-1], xs[1:]
    total = sums[y1][:, x1] - sums[y0][:, x1] - sums[y1][:, x0] + sums[y0][:, x0]
    area = np.maximum(np.outer(y1 - y0, x1 - x0), 1)[..., None]
    return (total / area).round().clip(0, 255).astype(np.uint8)


def halfblocks(pixels: np.ndarray, background: tuple[int, int, int]) -> list[Strip]:
    """(H, W, 3) pixels as ceil(H/2) strips of W cells: "▀", upper pixel as its colour, lower as its
    background (an odd last row over `background`)."""
    h, w = pixels.shape[:2]
    if h % 2:
        pixels = np.concatenate([pixels, np.broadcast_to(np.array(background, np.uint8), (1, w, 3))])
    styles: dict[tuple, Style] = {}
    strips = []
    rows = pixels.tolist()
    for r in range(0, len(rows), 2):
        segments = []
        for top, bottom in zip(rows[r], rows[r + 1]):
            key = (*top, *bottom)
            style = styles.get(key)
            if style is None:
                style = styles[key] = Style(color=Color.from_rgb(*top), bgcolor=Color.from_rgb(*bottom))
            segments.append(Segment("▀", style))
        strips.append(Strip(segments, w))
    return strips


def heat_columns(
    columns: list, steps: list[int], centres: list[float], edges: np.ndarray, log: bool = False
) -> list[np.ndarray | None]:
    """Each canvas column's shades, for a histogram's `columns` (in step order, `steps` theirs): the
    column logged at or before the canvas column's `centres` value (none before the first step, nor
    past the newest), its counts spread over the pixel rows between `edges` (values, bottom up) as the
    share of the values each row holds, scaled so that the column's fullest row is 1 (`log`: on
    log(1 + count), which shows the thin tails). None: no data there."""
    out: list[np.ndarray | None] = []
    last = steps[-1] if steps else None
    cache: dict[int, np.ndarray] = {}
    for x in centres:
        i = bisect.bisect_right(steps, x) - 1
        if i < 0 or last is None or x > last + _half_gap(steps):
            out.append(None)
            continue
        if i not in cache:
            cache[i] = _shades(columns[i], edges, log)
        out.append(cache[i])
    return out


def _half_gap(steps: list[int]) -> float:
    """How far past the newest step its column still shows: half the usual gap between steps."""
    if len(steps) < 2:
        return 0.5
    return max((steps[-1] - steps[0]) / (len(steps) - 1) / 2, 0.5)


def _shades(column, edges: np.ndarray, log: bool) -> np.ndarray:
    counts = np.asarray(column.counts, dtype=float)
    n = counts.size
    if n == 0 or not (math.isfinite(column.low) and math.isfinite(column.high)) or column.high <= column.low:
        return np.zeros(edges.size - 1)
    bins = np.linspace(column.low, column.high, n + 1)
    cdf = np.concatenate(([0.0], np.cumsum(counts)))
    mass = np.diff(np.interp(edges, bins, cdf))
    if log:
        mass = np.log1p(np.maximum(mass, 0))
    top = mass.max()
    return mass / top if top > 0 else mass


__all__ = ["fit", "halfblocks", "heat_columns", "read_image", "scaled"]
