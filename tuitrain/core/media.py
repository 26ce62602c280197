"""Samples and distributions: images, texts and histograms logged by a run, kept as files and said as
`MediaLogged` / `HistogramLogged` events.

`MediaLog` is what `log_image`, `log_text` and `log_histogram` hand their values to (a `Monitor`, a
`Learner`, `[log] samples` and `histograms`). The caller's thread only takes a copy: a CPU clone, or
from a GPU a copy into pinned memory started with `non_blocking` and waited for later; a histogram's
counts are made on the tensor's own device, one `histc`, and only the counts are copied. A worker
thread of the MediaLog makes the grid, shrinks large images (at most `MAX_SIDE` pixels on a side),
encodes the PNG, writes `media/<name>/<step>.png` or `.txt` atomically and then emits the event. When
the worker falls behind by `QUEUE_LIMIT` items, newer items are dropped (counted, and said once as
output) rather than the loop waiting.

Each name keeps at most `keep` files: past that, the file whose loss leaves the steps most evenly
spread is deleted (`thin`), so a long run keeps samples from its whole length, not only its end.

Images are made and encoded in images.py (PNG with zlib alone). Must not import textual.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from .events import HistogramLogged, MediaLogged, OutputPrinted
from .images import check_image, image_of, is_numpy, png_bytes, take_copy, take_image
from .retention import thin

BINS = 48  #: a histogram's bins
EVENT_TEXT_CHARS = 4000  #: a text's characters carried in its MediaLogged event
MAX_TEXT_CHARS = 1_000_000  #: a text's characters kept in its file
QUEUE_LIMIT = 64  #: items waiting for the worker before newer ones are dropped
MEDIA_DIR = "media"


# -- names and thinning -------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """A logged name as a relative folder: "/" separates folders, anything else odd becomes "_"."""
    parts = []
    for part in str(name).replace("\\", "/").split("/"):
        part = _UNSAFE.sub("_", part).strip()
        if part in ("", ".", ".."):
            part = "_" if part else ""
        if part:
            parts.append(part[:100])
    return "/".join(parts) or "_"


def check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{what} takes a name (a non-empty string), not {name!r}")
    return name.strip()


# -- histograms -----------------------------------------------------------------------------------------


def _range_of(parts: list[torch.Tensor]) -> tuple[float, float]:
    """The range a name's histograms keep: its first values' own, widened by half on each side (a
    distribution that spreads stays inside for a while); a single value gets +-1 around it."""
    lo = hi = None
    for v in parts:
        finite = v[torch.isfinite(v)]
        if finite.numel():
            a, b = (float(x) for x in torch.aminmax(finite))
            lo, hi = (a, b) if lo is None or hi is None else (min(lo, a), max(hi, b))
    if lo is None or hi is None:  # (both set together)
        return -1.0, 1.0
    span = hi - lo
    if span <= 0 or not math.isfinite(span):
        pad = max(abs(lo) * 0.5, 1e-3)
        return lo - pad, lo + pad
    return lo - span / 2, hi + span / 2


def _flat(values: torch.Tensor) -> torch.Tensor:
    v = values.detach().flatten()
    return v.float() if not v.is_floating_point() or v.dtype in (torch.float16, torch.bfloat16) else v


def _histc(v: torch.Tensor, bins: int, low: float, high: float, deterministic: bool | None = None) -> torch.Tensor:
    """`torch.histc` of values within [low, high] (low < high: a name's range); on a GPU under
    `torch.use_deterministic_algorithms`, where histc raises (it has no deterministic CUDA kernel), the
    same bins counted by a sort (bincount would read its size back: a sync)."""
    if deterministic is None:
        deterministic = v.device.type == "cuda" and torch.are_deterministic_algorithms_enabled()
    if not deterministic:
        return torch.histc(v, bins=bins, min=low, max=high)
    at = ((v - low) * bins / (high - low)).long().clamp_(0, bins - 1)  # histc's CUDA kernel's arithmetic
    starts = torch.searchsorted(at.sort().values, torch.arange(bins + 1, device=v.device))
    return starts.diff().float()


def histogram_counts(parts: list[torch.Tensor], low: float, high: float, bins: int = BINS) -> torch.Tensor:
    """(bins counts, then min, max, mean) of the values of all `parts` together, as floats on their
    device (one histc each, no concatenation); values past the range, infinities too, are counted in
    the end bins; NaN is not counted (on the CPU it is left out of min, max and mean too)."""
    counts = None
    lo = hi = total = None
    n = 0
    for v in parts:
        v = _flat(v)
        if v.numel() == 0:
            continue
        vmin, vmax = torch.aminmax(v)
        if v.device.type == "cpu" and math.isnan(float(vmin)):  # (on a GPU: no sync to ask)
            v = v[~torch.isnan(v)]
            if v.numel() == 0:
                continue
            vmin, vmax = torch.aminmax(v)
        c = _histc(v.clamp(low, high), bins, low, high)
        counts = c if counts is None else counts + c
        lo = vmin if lo is None else torch.minimum(lo, vmin)
        hi = vmax if hi is None else torch.maximum(hi, vmax)
        total = v.sum() if total is None else total + v.sum()
        n += v.numel()
    if counts is None or lo is None or hi is None or total is None:  # (all set together)
        return torch.zeros(bins + 3)
    return torch.cat([counts.float(), torch.stack([lo.float(), hi.float(), (total / n).float()])])


# -- the log --------------------------------------------------------------------------------------------

#: what the caller hands the worker: (kind: "text", "image" or "histogram", step, name, the copy)
Item = tuple[str, int, str, Any]


class MediaLog:
    """Images, texts and histograms of one run: copied on the caller's thread, encoded, written and said
    on a worker thread of its own. `emit`: the run's `bus.emit`; `run_dir`: where `media/` goes (None:
    the events only, a text in full in its event); `epoch`: the epoch now, for the events."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None,
        emit: Callable[[Any], None],
        keep: int = 100,
        epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.emit = emit
        self.keep = keep
        self.epoch = epoch
        self._ranges: dict[str, tuple[float, float]] = {}
        self._steps: dict[tuple[str, str], list[int]] = {}  # (folder, suffix) -> steps with a file
        self._queue: queue.Queue[tuple[Item, int] | None] = queue.Queue()  # (item, epoch); None: the end
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.dropped = 0
        self.cpu_seconds = 0.0  # the worker's CPU time so far (benchmarks/bench_media.py reads it)
        self.failed = ""  # the first write that failed: said once as output
        self._closed = False
        self._scanned = False

    # the caller's side: a copy, handed over
    def text(self, step: int, name: str, text: Any) -> None:
        name = check_name(name, "log_text")
        if not isinstance(text, str):
            text = str(text)
        self._put(("text", int(step), name, text[:MAX_TEXT_CHARS]))

    def image(self, step: int, name: str, images: Any) -> None:
        name = check_name(name, "log_image")
        self._put(("image", int(step), name, check_image(take_image(images))))

    def histogram(self, step: int, name: str, values: Any) -> None:
        """`values`: a tensor, a numpy array or a list of numbers, or a list of tensors counted together.
        CPU tensors are copied (a memcpy) and counted on the worker; a GPU's are counted where they are
        (a few kernels, no sync but at a name's first call) and only the counts are copied."""
        name = check_name(name, "log_histogram")
        if isinstance(values, (list, tuple)) and values and all(isinstance(v, torch.Tensor) for v in values):
            parts = list(values)
        elif isinstance(values, torch.Tensor):
            parts = [values]
        else:
            parts = [torch.as_tensor(values.copy() if is_numpy(values) else values)]
        parts = [p.detach() for p in parts if p.numel()]
        if not parts:
            return
        if all(p.device.type == "cpu" for p in parts):
            self._put(("histogram", int(step), name, [p.clone() for p in parts]))
            return
        r = self._range(name, parts)
        self._put(("histogram", int(step), name, (take_copy(histogram_counts(parts, *r)), r)))

    def _range(self, name: str, parts: list[torch.Tensor]) -> tuple[float, float]:
        r = self._ranges.get(name)
        if r is None:
            r = self._ranges[name] = _range_of([_flat(p) for p in parts])
        return r

    def _put(self, item: Item) -> None:
        if self._closed:
            return
        if self._queue.qsize() >= QUEUE_LIMIT:
            with self._lock:
                self.dropped += 1
                first = self.dropped == 1
            if first:
                self.emit(
                    OutputPrinted(
                        text=f"media: {item[2]!r} at step {item[1]} not kept: the media writer "
                        f"is {QUEUE_LIMIT} items behind (more are dropped while it is)",
                        stream="tuitrain",
                    )
                )
            return
        self._queue.put((item, self.epoch()))
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._work, name="tuitrain-media", daemon=True)
                    self._thread.start()

    # the worker's side
    def _work(self) -> None:
        # one thread for this thread's torch operations (OpenMP's count is per thread: the loop keeps its
        # own): two teams of OpenMP threads on the same cores wait on each other, and a histogram counted
        # here with two cost the training ~0.14 s each on the 2-core benchmark machine
        torch.set_num_threads(1)
        while True:
            got = self._queue.get()
            if got is None:
                return
            (kind, step, name, payload), epoch = got
            start = time.thread_time()
            try:
                self._write(kind, step, name, payload, epoch)
            except (ValueError, TypeError) as e:
                self.emit(OutputPrinted(text=f"media: {name!r} at step {step} not kept: {e}", stream="tuitrain"))
            except OSError as e:
                if not self.failed:
                    self.failed = str(e)
                    self.emit(
                        OutputPrinted(text=f"media: could not write {name!r} at step {step}: {e}", stream="tuitrain")
                    )
            except Exception as e:  # a bug must not end the worker: the run goes on without its media
                self.emit(
                    OutputPrinted(
                        text=f"media: {name!r} at step {step} not kept: {type(e).__name__}: {e}", stream="tuitrain"
                    )
                )
            finally:
                self.cpu_seconds += time.thread_time() - start
                self._queue.task_done()

    def _write(self, kind: str, step: int, name: str, payload: Any, epoch: int) -> None:
        if kind == "histogram":
            if isinstance(payload, list):  # CPU values: counted here
                low, high = self._range(name, payload)
                copy = take_copy(histogram_counts(payload, low, high))
            else:
                copy, (low, high) = payload
            values = copy.get().tolist()
            counts = [int(round(c)) for c in values[:-3]]
            lo, hi, mean = (v if math.isfinite(v) else 0.0 for v in values[-3:])
            self.emit(
                HistogramLogged(
                    key=name, step=step, low=low, high=high, counts=counts, min=lo, max=hi, mean=mean, epoch=epoch
                )
            )
            return
        if kind == "text":
            path = self._file(name, step, ".txt", payload.encode("utf-8", errors="replace"))
            shown = payload if path == "" else payload[:EVENT_TEXT_CHARS]
            self.emit(MediaLogged(key=name, step=step, kind="text", path=path, epoch=epoch, text=shown))
            return
        img = image_of(payload)
        path = self._file(name, step, ".png", png_bytes(img))
        self.emit(
            MediaLogged(
                key=name,
                step=step,
                kind="image",
                path=path,
                epoch=epoch,
                width=int(img.shape[2]),
                height=int(img.shape[1]),
            )
        )

    def _file(self, name: str, step: int, suffix: str, data: bytes) -> str:
        """Writes media/<name>/<step><suffix> atomically; thins the name's files; the relative path."""
        if self.run_dir is None:
            return ""
        folder = self.run_dir / MEDIA_DIR / safe_name(name)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{step}{suffix}"
        tmp = folder / f".{step}{suffix}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
        key = (str(folder), suffix)
        steps = self._steps.get(key)
        if steps is None:  # files already there: a resumed run's (thinning goes on over them)
            steps = self._steps[key] = sorted(
                int(p.stem) for p in folder.glob(f"*{suffix}") if p.stem.isdigit() and p.name != target.name
            )
        if step not in steps:
            steps.append(step)
            if len(steps) > 1 and steps[-2] > step:
                steps.sort()
        if self.keep and len(steps) > self.keep:
            for gone in thin(steps, self.keep):
                steps.remove(gone)
                try:
                    (folder / f"{gone}{suffix}").unlink()
                except FileNotFoundError:
                    pass
        return target.relative_to(self.run_dir).as_posix()

    def flush(self) -> None:
        """Waits until everything handed over is written and said."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        """Writes what waits, then ends the worker; later calls are ignored."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()


# -- a Learner's samples and histograms (`[log] samples`, `histograms`) ----------------------------------


def module_groups(model: torch.nn.Module) -> list[tuple[str, list[torch.nn.Parameter]]]:
    """(name, parameters) of each top-level module that has any; the model's own parameters (outside
    its children) under its class name."""
    groups: list[tuple[str, list[torch.nn.Parameter]]] = []
    own = [p for p in model._parameters.values() if p is not None]
    if own:
        groups.append((type(model).__name__, own))
    for name, child in model.named_children():
        params = [p for p in child.parameters() if p is not None]
        if params:
            groups.append((name, params))
    return groups


SAMPLES_NAME = "samples"  #: the name a samples function's lone string or image is logged under


class LearnerMedia:
    """What `[log] samples` and `[log] histograms` ask of a Learner's loop: `next_step` is the first step
    at which anything is due (the loop compares it, one int, after each step, and calls `at_step`); the
    gradients' histograms are taken just before their optimizer steps (a step pre-hook: the loop clears
    the gradients right after), the weights' after the step."""

    def __init__(
        self,
        media: MediaLog,
        model: torch.nn.Module,
        optimizers: dict[str, torch.optim.Optimizer],
        log: Any,
        state: Any,
        ema: Any = None,
    ) -> None:
        self.media, self.model, self.state, self.ema = media, model, state, ema
        self.fn: Callable[[torch.nn.Module, int], Any] | None = log.samples.get("target") if log.samples else None
        self.samples_every = log.samples_every if self.fn is not None else 0
        self.hist_every = log.histograms_every_n_steps if log.histograms else 0
        self.weights = "weights" in log.histograms and self.hist_every > 0
        self.grads = "grads" in log.histograms and self.hist_every > 0
        self.groups = module_groups(model) if self.hist_every else []
        self._hooks: list[RemovableHandle] = []
        if self.grads:
            for opt in optimizers.values():
                ids = {id(p) for g in opt.param_groups for p in g["params"]}
                mine = [(n, ps) for n, ps in self.groups if any(id(p) in ids for p in ps)]
                if mine:
                    self._hooks.append(opt.register_step_pre_hook(self._grads_hook(mine)))
        self.next_step = self._next(state.step)

    def _next(self, step: int) -> int:
        due = [step - step % n + n for n in (self.samples_every, self.hist_every if self.weights else 0) if n]
        return min(due) if due else 1 << 62

    def _grads_hook(
        self, groups: list[tuple[str, list[torch.nn.Parameter]]]
    ) -> Callable[[torch.optim.Optimizer, tuple[Any, ...], dict[str, Any]], None]:
        def hook(optimizer: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            step = self.state.step + 1  # the step this update makes
            if step % self.hist_every == 0:
                for name, params in groups:
                    grads = [p.grad for p in params if p.grad is not None]
                    if grads:
                        self.media.histogram(step, f"grads/{name}", grads)

        return hook

    def at_step(self, step: int) -> None:
        """What is due at `step` (the loop calls this when step >= next_step)."""
        self.next_step = self._next(step)
        if self.weights and step % self.hist_every == 0:
            for name, params in self.groups:
                self.media.histogram(step, f"weights/{name}", [p.detach() for p in params])
        if self.samples_every and step % self.samples_every == 0:
            self.sample(step)

    def sample(self, step: int) -> None:
        """Calls the samples function in eval mode under no_grad (the EMA's weights when [ema] is on) and
        logs what it returns."""
        fn = self.fn
        if fn is None:  # (never: no samples function, no samples due)
            return
        model = self.model
        was = model.training
        model.eval()
        try:
            with torch.no_grad(), self.ema.swapped_in() if self.ema is not None else contextlib.nullcontext():
                got = fn(model, step)
        finally:
            model.train(was)
        self.log_returned(step, got)

    def log_returned(self, step: int, got: Any) -> None:
        items = got.items() if isinstance(got, dict) else [(SAMPLES_NAME, got)]
        for name, value in items:
            if value is None:
                continue
            if isinstance(value, str):
                self.media.text(step, str(name), value)
            else:
                self.media.image(step, str(name), value)

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []


class QuietMedia:
    """The media of a rank other than 0: every call ignored (rank 0 logs the run's)."""

    def text(self, *args: Any) -> None:
        pass

    image = histogram = text

    def flush(self) -> None:
        pass

    close = flush
