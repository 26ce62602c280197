"""`TensorBoardSink`: a run's metrics, samples and distributions as TensorBoard's scalars, images,
text and histograms under `run_dir/tensorboard/` (`[log] tensorboard = true`).

Tags: `<split>/<metric>` for step values, `<split>/epoch_<metric>` for a phase's aggregate, both
at the global optimizer step so that the two curves line up; an image, a text or a histogram under
the name it was logged with ("samples", "weights/fc1"). An image is read back from the PNG file its
`MediaLogged` names (a file already thinned away is passed over); a text comes from the event itself
(its first `media.EVENT_TEXT_CHARS` characters). The optional `tensorboard` package and
`torch.utils.tensorboard` are imported in the constructor only; must not import textual.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from tuitrain.core.events import (
    EpochCompleted,
    Event,
    HistogramLogged,
    MediaLogged,
    MetricsLogged,
    RunFailed,
    RunFinished,
)
from tuitrain.core.png import PngError, read_png

MISSING = "tensorboard is not installed: pip install 'tuitrain[tensorboard]'"


def summary_writer_class() -> Any:
    """torch's SummaryWriter; RuntimeError with the install hint when tensorboard is missing."""
    # checked first so the hint comes without paying for a torch import
    if importlib.util.find_spec("tensorboard") is None:
        raise RuntimeError(MISSING)
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise RuntimeError(MISSING) from e
    return SummaryWriter


def _scalar(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


_BACKTICKS = re.compile("`+")


def code_block(text: str) -> str:
    """`text` as a Markdown code block (TensorBoard renders text as Markdown: a generated sample of
    code or prose is shown as it is), fenced by more backticks than the text holds in a row."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def histogram_buckets(event: HistogramLogged) -> dict[str, Any] | None:
    """A `HistogramLogged` as the keyword arguments of `SummaryWriter.add_histogram_raw`; None when it
    counted nothing.

    TensorBoard keeps each bucket's upper limit only (a bucket starts where the one before ends, the
    first at the histogram's min), so, as torch's own `add_histogram` does, the bins are cut to those
    from the first to the last that count anything, behind an empty bucket. The first counted bin
    starts at min and the last ends at max (they hold any values clamped in from past low..high).
    `sum` is exact (mean x num); `sum_squares` is not in the event and is estimated from the bins'
    centres, less Sheppard's correction (num x width^2 / 12: grouping in bins adds that much), and
    never below sum^2 / num (a variance is not negative)."""
    counts = [int(c) for c in event.counts]
    num = sum(counts)
    if not counts or num <= 0:
        return None
    width = (event.high - event.low) / len(counts)
    first = next(i for i, c in enumerate(counts) if c)
    last = max(i for i, c in enumerate(counts) if c)
    limits = [event.min] + [event.low + (i + 1) * width for i in range(first, last)] + [event.max]
    centres = sum(c * ((limits[k] + limits[k + 1]) / 2) ** 2 for k, c in enumerate(counts[first : last + 1]))
    total = event.mean * num
    sum_squares = max(centres - num * width * width / 12, total * total / num)
    return {
        "min": event.min,
        "max": event.max,
        "num": num,
        "sum": total,
        "sum_squares": sum_squares,
        "bucket_limits": limits,
        "bucket_counts": [0] + counts[first : last + 1],
    }


class TensorBoardSink:
    """Writes every numeric logged metric as a scalar, each logged image, text and histogram as
    TensorBoard's own; flushes per epoch and at the end."""

    stores_run = True  # a failed write (a full disk) ends the run: see EventBus.on_write_failure
    step_events = False  # the EventBus spares it StepStarted/StepCompleted: it ignores them
    batch_events = True  # it may get the frequent events in batches (EventBus)

    def __init__(self, run_dir: str | os.PathLike[str], log_dir: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(run_dir)  # where a MediaLogged's path is read from
        self.log_dir = Path(log_dir) if log_dir is not None else self.root / "tensorboard"
        self.writer = summary_writer_class()(log_dir=str(self.log_dir))
        self.unread = 0  # images whose file could not be read (thinned away already, damaged)

    def __call__(self, event: Event, state: object = None) -> None:
        if self.writer is None:  # closed
            return
        match event:
            case MetricsLogged(split=split, step=step, metrics=metrics, scope=scope):
                prefix = "epoch_" if scope == "epoch" else ""
                for name, value in metrics.items():
                    v = _scalar(value)
                    if v is not None:
                        self.writer.add_scalar(f"{split}/{prefix}{name}", v, global_step=step, walltime=event.time)
            case MediaLogged(kind="text"):
                self.writer.add_text(event.key, code_block(event.text), global_step=event.step, walltime=event.time)
            case MediaLogged(kind="image"):
                self._image(event)
            case HistogramLogged():
                raw = histogram_buckets(event)
                if raw is not None:
                    self.writer.add_histogram_raw(event.key, global_step=event.step, walltime=event.time, **raw)
            case EpochCompleted() | RunFinished() | RunFailed():
                self.writer.flush()

    def _image(self, event: MediaLogged) -> None:
        rel = Path(event.path)
        if not event.path or rel.is_absolute() or ".." in rel.parts:  # only files of this run's media/
            return
        try:
            data = (self.root / event.path).read_bytes()
            w, h, rgb = read_png(data)
        except (OSError, PngError):  # a read, not a write of the run: never a reason to stop it
            self.unread += 1
            return
        import numpy as np  # tensorboard's own requirement

        pixels = np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3)
        self.writer.add_image(event.key, pixels, global_step=event.step, walltime=event.time, dataformats="HWC")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
