"""The TensorBoard records the scalar fast path of tfrecord.py leaves: decoded with protobuf (TensorBoard's
own generated `Event` classes, tensorboard.compat.proto), said as what tuitrain's dashboard reads:
scalars written as tensors (`tf.summary.scalar`, `add_scalar(new_style=True)`), images (the classic
`Summary.Image` and the "images" plugin's string tensor), texts (the "text" plugin's DT_STRING tensor),
histograms (the classic `HistogramProto` and the "histograms" plugin's (k, 3) tensor, re-binned to equal
bins) and hparams (the "hparams" plugin's session start: the run's config).

A value names its plugin only in the first record of its tag (TensorBoard's writers drop the metadata
after that): `Decoder` remembers each tag's plugin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuitrain.core.events import HistogramLogged, MediaLogged
from tuitrain.sources import media_cache

BINS = 48  # a histogram's equal bins, as tuitrain's own (core/media.py)
TEXT_CHARS = 4000  # a text's characters carried in its event (core/media.py's EVENT_TEXT_CHARS)
_NUMERIC = {1: "<f4", 2: "<f8", 3: "<i4", 4: "<u1", 5: "<i2", 6: "<i1", 9: "<i8", 10: "?", 19: "<f2", 17: "<u2"}
_VALS = {1: "float_val", 2: "double_val", 3: "int_val", 4: "int_val", 5: "int_val", 6: "int_val", 9: "int64_val",
         10: "bool_val", 17: "int_val", 19: "half_val"}  # fmt: skip
DT_STRING = 7


class MissingProtobuf(ImportError):
    pass


def event_class() -> Any:
    """TensorBoard's Event class, or MissingProtobuf naming the extra."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError as e:  # pragma: no cover - the extra
        raise MissingProtobuf(
            "pictures, texts, histograms and hparams of TensorBoard files need the tensorboard package: "
            "pip install 'tuitrain[tensorboard]'"
        ) from e
    return Event


@dataclass
class Found:
    """What some records said besides their plain scalars."""

    scalars: list[tuple[int, str, int, float, float]] = field(default_factory=list)  # (record, tag, step, wall, value)
    media: list[tuple[int, Any]] = field(default_factory=list)  # (record, MediaLogged or HistogramLogged)
    config: dict[str, Any] = field(default_factory=dict)  # hparams
    undecodable: list[int] = field(default_factory=list)  # records whose bytes are no Event
    first_wall: float | None = None


class Decoder:
    """Decodes records one at a time, remembering what each tag is (its plugin) and each histogram's range."""

    def __init__(self) -> None:
        self.Event = event_class()
        self.plugins: dict[str, str] = {}  # tag -> plugin name, from its first record
        self.ranges: dict[str, tuple[float, float]] = {}  # histogram tag -> (low, high) of its first one

    def decode(self, buf: bytes, starts: np.ndarray, lengths: np.ndarray, which: np.ndarray) -> Found:
        out = Found()
        from google.protobuf.message import DecodeError

        for i in which.tolist():
            s, n = int(starts[i]) + 12, int(lengths[i])
            try:
                event = self.Event.FromString(buf[s : s + n])
            except (DecodeError, RecursionError, ValueError):
                out.undecodable.append(i)
                continue
            if out.first_wall is None and event.wall_time:
                out.first_wall = event.wall_time
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                try:
                    self._value(i, event, value, out)
                except (ValueError, TypeError, IndexError, OverflowError):
                    continue  # a value of a shape no writer makes: left out
        return out

    def _value(self, i: int, event: Any, value: Any, out: Found) -> None:
        tag = value.tag or value.node_name
        if value.HasField("metadata") and value.metadata.plugin_data.plugin_name:
            self.plugins.setdefault(tag, value.metadata.plugin_data.plugin_name)
        plugin = self.plugins.get(tag, "")
        if plugin == "hparams":  # torch writes its three summaries with metadata and no value
            if value.HasField("metadata"):
                out.config.update(hparams_of(value.metadata.plugin_data.content))
            return
        kind = value.WhichOneof("value")
        step, wall = int(event.step), float(event.wall_time)
        if kind == "simple_value":
            out.scalars.append((i, tag, step, wall, float(value.simple_value)))
        elif kind == "image":
            self._image(i, tag, step, wall, value.image.encoded_image_string, out)
        elif kind == "histo":
            h = value.histo
            self._histogram(i, tag, step, wall, list(h.bucket_limit), list(h.bucket), h.min, h.max, h.num, h.sum, out)
        elif kind == "tensor":
            self._tensor(i, tag, plugin, step, wall, value, out)

    def _tensor(self, i: int, tag: str, plugin: str, step: int, wall: float, value: Any, out: Found) -> None:
        t = value.tensor
        if t.dtype == DT_STRING:
            strings = list(t.string_val)
            if plugin == "images" or (not plugin and len(strings) >= 3 and media_cache.png_size(strings[2])[0]):
                for blob in strings[2:]:  # [width, height, picture, picture, ...]
                    self._image(i, tag, step, wall, blob, out)
            elif plugin in ("text", ""):
                shape = [d.size for d in t.tensor_shape.dim]
                words = [s.decode("utf-8", errors="replace") for s in strings]
                if len(shape) == 2 and shape[1] > 0:  # a table: its rows, cells between bars
                    rows = [" | ".join(words[r * shape[1] : (r + 1) * shape[1]]) for r in range(shape[0])]
                    text = "\n".join(rows)
                else:
                    text = "\n".join(words)
                self._text(i, tag, step, wall, text, out)
            return
        array = tensor_values(t)
        if array is None:
            return
        if plugin == "histograms" or (not plugin and array.ndim == 2 and array.shape[1] == 3):
            if array.ndim != 2 or array.shape[1] != 3 or not array.shape[0]:
                return
            left, right, counts = array[:, 0], array[:, 1], array[:, 2]
            limits = right.tolist()
            lo, hi = float(left[0]), float(right[-1])
            total = float(counts.sum())
            mean_sum = float(((left + right) / 2 * counts).sum())
            self._histogram(i, tag, step, wall, limits, counts.tolist(), lo, hi, total, mean_sum, out, left=left)
        elif array.size == 1 and plugin in ("scalars", ""):
            out.scalars.append((i, tag, step, wall, float(array.ravel()[0])))

    def _image(self, i: int, tag: str, step: int, wall: float, blob: bytes, out: Found) -> None:
        width, height = media_cache.png_size(blob)
        suffix = ".png" if width else _image_suffix(blob)
        path = media_cache.store(blob, suffix)
        event = MediaLogged(
            key=tag, step=step, kind="image", path=str(path or ""), width=width, height=height, time=wall
        )
        out.media.append((i, event))

    def _text(self, i: int, tag: str, step: int, wall: float, text: str, out: Found) -> None:
        tag = tag.removesuffix("/text_summary")  # torch's add_text names the tag so
        path = media_cache.store(text.encode("utf-8"), ".txt") if len(text) > TEXT_CHARS else None
        event = MediaLogged(key=tag, step=step, kind="text", path=str(path or ""), text=text[:TEXT_CHARS], time=wall)
        out.media.append((i, event))

    def _histogram(
        self,
        i: int,
        tag: str,
        step: int,
        wall: float,
        limits: list[float],
        counts: list[float],
        lo: float,
        hi: float,
        num: float,
        total: float,
        out: Found,
        left: np.ndarray | None = None,
    ) -> None:
        lo, hi = float(lo), float(hi)
        if not (math.isfinite(lo) and math.isfinite(hi)) or not counts or num <= 0:
            return
        low, high = self.ranges.setdefault(tag, (lo, hi if hi > lo else lo + 1.0))
        binned = rebin(np.asarray(limits, np.float64), np.asarray(counts, np.float64), lo, hi, low, high, left)
        mean = float(total) / float(num) if num else 0.0
        event = HistogramLogged(
            key=tag, step=step, low=low, high=high, counts=binned, min=lo, max=hi, mean=mean, time=wall
        )
        out.media.append((i, event))


def rebin(
    limits: np.ndarray,
    counts: np.ndarray,
    lo: float,
    hi: float,
    low: float,
    high: float,
    left: np.ndarray | None = None,
    bins: int = BINS,
) -> list[int]:
    """Counts over TensorBoard's buckets (bucket i ends at limits[i] and begins where the one before ends,
    the first at `lo`; or at `left[i]` in the tensor form) spread evenly over equal bins from `low` to
    `high` (a bucket's count shared by the overlap; values outside the range counted in the end bins).
    The buckets' ends are first clipped to the values' own range [lo, hi] (the last limit is DBL_MAX)."""
    if left is None:
        left = np.concatenate(([lo], limits[:-1]))
    right = np.minimum(np.maximum(limits, lo), hi)
    left = np.minimum(np.maximum(np.asarray(left, np.float64), lo), hi)
    right = np.maximum(right, left)
    edges = np.linspace(low, high, bins + 1)
    width = right - left
    out = np.zeros(bins)
    point = width <= 0  # all of a bucket's values at one place (or a bucket squeezed by the clip)
    if point.any():
        at = np.clip(np.searchsorted(edges, left[point], side="right") - 1, 0, bins - 1)
        np.add.at(out, at, counts[point])
    spread = ~point & (counts > 0)
    if spread.any():
        a, b, c = left[spread], right[spread], counts[spread]
        cum = np.clip((edges[None, :] - a[:, None]) / (b - a)[:, None], 0.0, 1.0)  # share of each bucket below edge
        out += (np.diff(cum, axis=1) * c[:, None]).sum(axis=0)
        out[0] += (cum[:, 0] * c).sum()  # below the range: the first bin
        out[-1] += ((1.0 - cum[:, -1]) * c).sum()  # above it: the last
    return _round_keeping_total(out)


def _round_keeping_total(values: np.ndarray) -> list[int]:
    floor = np.floor(values)
    short = int(round(values.sum() - floor.sum()))
    if short > 0:
        floor[np.argsort(-(values - floor), kind="stable")[:short]] += 1
    return [int(v) for v in floor]


def tensor_values(t: Any) -> np.ndarray | None:
    """A numeric TensorProto as a numpy array (its packed bytes or its repeated field), or None."""
    kind = _NUMERIC.get(t.dtype)
    if kind is None:
        return None
    shape = [d.size for d in t.tensor_shape.dim]
    if t.tensor_content:
        array = np.frombuffer(t.tensor_content, kind)
    elif t.dtype == 19:  # half_val holds the float16 bits as ints
        array = np.asarray(list(t.half_val), np.uint16).view(np.float16)
    else:
        array = np.asarray(list(getattr(t, _VALS[t.dtype])), kind)
    size = int(np.prod(shape)) if shape else 1
    if array.size == 1 and size > 1:  # a constant: one value stands for all
        array = np.full(size, array[0])
    if array.size != size:
        return None
    return array.astype(np.float64).reshape(shape)


def hparams_of(content: bytes) -> dict[str, Any]:
    """The hyperparameters of an hparams plugin's session start (name -> number, text or bool)."""
    try:
        from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
    except ImportError:  # pragma: no cover - the extra
        return {}
    data = HParamsPluginData.FromString(content)
    if not data.HasField("session_start_info"):
        return {}
    out: dict[str, Any] = {}
    for name, v in data.session_start_info.hparams.items():
        kind = v.WhichOneof("kind")
        if kind == "number_value":
            number = v.number_value
            out[name] = int(number) if number.is_integer() and abs(number) < 2**53 else number
        elif kind in ("string_value", "bool_value"):
            out[name] = getattr(v, kind)
    return out


def _image_suffix(blob: bytes) -> str:
    if blob[:3] == b"\xff\xd8\xff":
        return ".jpg"
    if blob[:6] in (b"GIF87a", b"GIF89a"):
        return ".gif"
    return ".img"
