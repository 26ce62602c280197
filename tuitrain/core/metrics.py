"""Metrics: accumulated on the device per batch, turned into floats only when a value is due.

Each metric keeps a running "window" (since the last logged step) and folds it into the phase total
when the window is read, so a step costs one in-place tensor op per metric and no device sync.
Must not import textual.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

from .state import StepOutput as StepOutput  # what a step returns: its home before was here


class Context:
    """What a metric may read when asked for a value: the optimizer and the window/phase counters."""

    def __init__(self) -> None:
        self.optimizer: torch.optim.Optimizer | None = None
        self.window_items = self.window_steps = 0
        self.window_time = 0.0
        self.phase_items = 0
        self.phase_steps = 0
        self.phase_time = 0.0
        self.window_wait = 0.0  # seconds spent waiting for the next batch (data_wait only)
        self.phase_wait = 0.0


class Metric:
    name = "metric"

    def update(self, out: StepOutput, n: int) -> None:
        """Called per batch with tensors; must not sync the device."""

    def window(self, ctx: Context) -> float | None:
        """The value since the last call (then folded into the phase total)."""
        return None

    def phase(self, ctx: Context) -> float | None:
        return None

    def reset(self) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class _Ratio(Metric):
    """sum(numerator)/sum(denominator), the numerator accumulated as a device tensor."""

    def __init__(self) -> None:
        self.reset()

    BATCH = 256  #: values kept as tensors before they are summed on the device in one op

    def reset(self) -> None:
        self._values: list[torch.Tensor] = []
        self._weights: list[float] = []
        self._acc: torch.Tensor | None = None
        self._fsum = 0.0  # values that arrived as Python floats
        self._count = 0
        self.total = 0.0
        self.count = 0

    def add_float(self, value: float, n: int, weight: float = 1.0) -> None:
        self._fsum += value * weight
        self._count += n

    def add_tensor(self, value: torch.Tensor, n: int, weight: float = 1.0) -> None:
        # a list append per step, not a tensor op: the sum happens when a value is due
        self._values.append(value.detach())
        self._weights.append(weight)
        self._count += n
        if len(self._values) >= self.BATCH:
            self._collapse()

    def _collapse(self) -> None:
        """Sum the pending values into the device accumulator (no device sync)."""
        if not self._values:
            return
        vals = torch.stack([v if v.dim() == 0 else v.reshape(()) for v in self._values])
        dtype = torch.float32 if vals.device.type == "mps" else torch.float64
        w = self._weights
        total = (
            vals.to(dtype).sum() * w[0]
            if w.count(w[0]) == len(w)
            else (vals.to(dtype) * torch.tensor(w, dtype=dtype, device=vals.device)).sum()
        )
        self._acc = total if self._acc is None else self._acc + total
        self._values, self._weights = [], []

    def _window_sum(self) -> float:
        self._collapse()
        return self._fsum + (float(self._acc) if self._acc is not None else 0.0)

    def _fold(self) -> tuple[float, int]:
        if self._count == 0:
            return 0.0, 0
        s, c = self._window_sum(), self._count
        self._acc = None
        self._fsum = 0.0
        self._count = 0
        self.total += s
        self.count += c
        return s, c

    def window(self, ctx: Context) -> float | None:
        s, c = self._fold()
        return s / c if c else None

    def phase(self, ctx: Context) -> float | None:
        self._fold()
        return self.total / self.count if self.count else None

    def state_dict(self) -> dict[str, Any]:
        return {"window": self._window_sum(), "window_count": self._count, "total": self.total, "count": self.count}

    def window_sum(self) -> tuple[float, int]:
        return self._window_sum(), self._count

    def set_window(self, s: float, c: int) -> None:
        """Replace the unread window (distributed: with the sum over every rank)."""
        self._acc = None
        self._fsum = float(s) if c else 0.0
        self._count = c

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reset()
        self.total, self.count = float(state["total"]), int(state["count"])
        self.set_window(state["window"], int(state["window_count"]))


class Loss(_Ratio):
    name = "loss"

    def update(self, out: StepOutput, n: int) -> None:
        if out.value is not None:  # read already: no tensor work at all
            self.add_float(out.value, n, float(n))
        else:
            self.add_tensor(out.loss, n, float(n))


def _predictions(output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if target.dim() == output.dim() and target.is_floating_point() and output.shape[-1] > 1:
        target = target.argmax(-1)  # one-hot or soft targets
    if output.dim() == target.dim() + 1 and output.shape[-1] > 1:
        return output.argmax(-1), target
    return (output.reshape(target.shape) > 0).to(target.dtype), target  # binary logits


#: class labels equal to this are not counted by the accuracy metrics: the `ignore_index` of
#: torch's CrossEntropyLoss and the padding label of Hugging Face datasets
IGNORE_INDEX = -100


class _Hits(_Ratio):
    """Hits over counted targets, where integer targets equal to IGNORE_INDEX are not counted.
    How many were left out stays a device tensor until the value is read (no sync per step)."""

    def reset(self) -> None:
        super().reset()
        self._left_out: list[torch.Tensor] = []

    def _hits(self, hit: torch.Tensor, target: torch.Tensor) -> None:
        # a prediction is a class index >= 0 (or 0/1): never a hit on IGNORE_INDEX, so only the count changes
        if target.dtype in (torch.int64, torch.int32, torch.int16, torch.int8):
            self._left_out.append((target == IGNORE_INDEX).sum())
            if len(self._left_out) >= self.BATCH:
                self._left_out = [torch.stack(self._left_out).sum()]
        self.add_tensor(hit.sum(), target.numel())

    def _settle(self) -> None:
        if self._left_out:
            self._count -= int(torch.stack(self._left_out).sum())
            self._left_out = []

    def _fold(self) -> tuple[float, int]:
        self._settle()
        return super()._fold()

    def window_sum(self) -> tuple[float, int]:
        self._settle()
        return super().window_sum()

    def state_dict(self) -> dict[str, Any]:
        self._settle()
        return super().state_dict()


class Accuracy(_Hits):
    name = "accuracy"

    def update(self, out: StepOutput, n: int) -> None:
        if out.output is None or out.target is None:
            raise ValueError("metric 'accuracy' needs the step to return 'output' and 'target'")
        pred, target = _predictions(out.output.detach(), out.target)
        self._hits(pred == target, target)


class TopKAccuracy(_Hits):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.name = f"top{k}_accuracy"

    def update(self, out: StepOutput, n: int) -> None:
        if out.output is None or out.target is None:
            raise ValueError(f"metric '{self.name}' needs the step to return 'output' and 'target'")
        output, target = out.output.detach(), out.target
        k = min(self.k, output.shape[-1])
        self._hits(output.topk(k, dim=-1).indices.eq(target.unsqueeze(-1)).any(-1), target)


class StepValue(_Ratio):
    """A named value the step returns besides its loss ({"loss": ..., "g_loss": ...}), averaged by items."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def update(self, out: StepOutput, n: int) -> None:
        value = out.extras.get(self.name) if out.extras else None
        if value is None:
            got = ", ".join(["loss", *(out.extras or {})]) if out.loss is not None else ", ".join(out.extras or {})
            import difflib

            near = difflib.get_close_matches(self.name, BUILTIN, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(
                f"metric {self.name!r}{hint} is not built in ({', '.join(BUILTIN)}, topK_accuracy) "
                f"and the step returned no {self.name!r} value (it returned: {got or 'nothing'})"
            )
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(float(value), dtype=torch.float64)
        self.add_tensor(value, n, float(n))


class LearningRate(Metric):
    name = "lr"

    def window(self, ctx: Context) -> float | None:
        return float(ctx.optimizer.param_groups[0]["lr"]) if ctx.optimizer is not None else None

    phase = window


class Throughput(Metric):
    """Items per second."""

    name = "throughput"

    def window(self, ctx: Context) -> float | None:
        return ctx.window_items / ctx.window_time if ctx.window_time > 0 else None

    def phase(self, ctx: Context) -> float | None:
        return ctx.phase_items / ctx.phase_time if ctx.phase_time > 0 else None


class StepTime(Metric):
    """Seconds per optimizer step (per batch in validation)."""

    name = "step_time"

    def window(self, ctx: Context) -> float | None:
        return ctx.window_time / ctx.window_steps if ctx.window_steps else None

    def phase(self, ctx: Context) -> float | None:
        return ctx.phase_time / ctx.phase_steps if ctx.phase_steps else None


class GradNorm(Metric):
    """The total norm of the gradients before clipping, computed only on logged steps (the Learner
    adds it as a device tensor; it is read when the step is logged)."""

    name = "grad_norm"

    def __init__(self) -> None:
        self._norms: list[torch.Tensor | float] = []
        self._last: float | None = None

    def add(self, norm: torch.Tensor | float) -> None:
        self._norms.append(norm.detach() if isinstance(norm, torch.Tensor) else norm)

    def window(self, ctx: Context) -> float | None:
        if self._norms:  # several optimizers stepped in one step: the norm over all of them
            norms, self._norms = self._norms, []
            self._last = math.sqrt(sum(float(n) ** 2 for n in norms))
        return self._last

    phase = window

    def reset(self) -> None:
        self._norms = []


class DataWait(Metric):
    """The share of the phase's time spent waiting for the next batch (0: the data is never late;
    0.5: half the time the device had nothing to do), timed around the loader in the loop."""

    name = "data_wait"

    def window(self, ctx: Context) -> float | None:
        return min(1.0, ctx.window_wait / ctx.window_time) if ctx.window_time > 0 else None

    def phase(self, ctx: Context) -> float | None:
        return min(1.0, ctx.phase_wait / ctx.phase_time) if ctx.phase_time > 0 else None


class FlopsSource(Protocol):  # what tflops and mfu read a step's FLOPs from: flops.py's StepFlops, GivenFlops
    def per_step(self) -> float | None: ...


class Tflops(Metric):
    """Achieved TFLOP/s of this process: the FLOPs of one optimizer step (counted once on the first
    batch, or given; see flops.py) times the steps since the last read, over their seconds. Nothing
    happens per step. Under DDP/FSDP each process counts its own share; the job's figure is this one
    times the processes when they do equal work."""

    name = "tflops"

    def __init__(self) -> None:
        self.flops: FlopsSource | None = None  # an object with per_step() -> FLOPs or None (set by flops.setup)
        self.peak = 0.0  # one device's peak TFLOP/s (mfu)

    def _value(self, steps: int, seconds: float) -> float | None:
        per_step = self.flops.per_step() if self.flops is not None else None
        if per_step is None or not steps or seconds <= 0:
            return None
        return per_step * steps / seconds / 1e12

    def window(self, ctx: Context) -> float | None:
        return self._value(ctx.window_steps, ctx.window_time)

    def phase(self, ctx: Context) -> float | None:
        return self._value(ctx.phase_steps, ctx.phase_time)


class Mfu(Tflops):
    """Model FLOPs utilization in percent: the job's achieved FLOP/s over the peak of its devices
    (peak x processes), which is this process's tflops over one device's peak."""

    name = "mfu"

    def _value(self, steps: int, seconds: float) -> float | None:
        tflops = super()._value(steps, seconds)
        return tflops / self.peak * 100.0 if tflops is not None and self.peak else None


class MaxMemory(Metric):
    """Bytes: on a CUDA device the peak allocated since the last read (the allocator's own counter,
    no device sync); elsewhere the process's resident memory when read. The phase value is the
    highest reading of the phase."""

    name = "max_memory"

    def __init__(self) -> None:
        self.device: torch.device | None = None  # set by flops.setup; None reads the RSS
        self._proc: Any = None  # psutil.Process, made on first use
        self._phase_max = 0.0

    def _read(self) -> float:
        dev = self.device
        if dev is not None and dev.type == "cuda":
            peak = torch.cuda.max_memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        else:
            if self._proc is None:
                import psutil

                self._proc = psutil.Process()
            peak = self._proc.memory_info().rss
        self._phase_max = max(self._phase_max, float(peak))
        return float(peak)

    def window(self, ctx: Context) -> float | None:
        return self._read()

    def phase(self, ctx: Context) -> float | None:
        self._read()
        return self._phase_max

    def reset(self) -> None:
        self._phase_max = 0.0
        if self.device is not None and self.device.type == "cuda":
            if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # unannotated in torch
                torch.cuda.reset_peak_memory_stats(self.device)


class TorchMetric(Metric):
    """Any torchmetrics `Metric`: updated with (output, target); a logged step shows the running value."""

    def __init__(self, metric: Any, name: str) -> None:
        self.metric, self.name = metric, name

    def update(self, out: StepOutput, n: int) -> None:
        if out.output is None or out.target is None:
            raise ValueError(f"metric '{self.name}' needs the step to return 'output' and 'target'")
        if getattr(self.metric, "device", None) != out.output.device:
            self.metric.to(out.output.device)
        self.metric.update(out.output.detach(), out.target)

    def window(self, ctx: Context) -> float | None:
        return self.phase(ctx)

    def phase(self, ctx: Context) -> float | None:
        if getattr(self.metric, "update_count", 1) == 0:
            return None
        value = self.metric.compute()
        return float(value) if isinstance(value, torch.Tensor) and value.numel() == 1 else None

    def reset(self) -> None:
        self.metric.reset()

    def state_dict(self) -> dict[str, Any]:
        return {
            k: (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v)
            for k, v in getattr(self.metric, "metric_state", {}).items()
            if isinstance(v, torch.Tensor)
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self.metric, k, v)
        if state and hasattr(self.metric, "_update_count"):
            self.metric._update_count = max(1, self.metric._update_count)


BUILTIN = {
    "loss": Loss,
    "accuracy": Accuracy,
    "lr": LearningRate,
    "throughput": Throughput,
    "step_time": StepTime,
    "grad_norm": GradNorm,
    "data_wait": DataWait,
    "tflops": Tflops,
    "mfu": Mfu,
    "max_memory": MaxMemory,
}
_TOPK = re.compile(r"^top(\d+)_accuracy$")


def make_metric(spec: Any, step_values: bool = False) -> Metric:
    """A metric from a name ("loss", "top5_accuracy"), a Metric, or a torchmetrics object.

    With `step_values`, another name reads the value of that name the step returns (a StepValue)."""
    if isinstance(spec, Metric):
        return spec
    if isinstance(spec, str):
        if spec in BUILTIN:
            return BUILTIN[spec]()
        m = _TOPK.match(spec)
        if m and int(m.group(1)) >= 1:
            return TopKAccuracy(int(m.group(1)))
        if step_values and spec.isidentifier():
            return StepValue(spec)
        raise ValueError(f"unknown metric {spec!r}; known: {', '.join(BUILTIN)}, topK_accuracy")
    if hasattr(spec, "update") and hasattr(spec, "compute"):
        return TorchMetric(spec, getattr(spec, "name", None) or type(spec).__name__)
    raise TypeError(f"cannot make a metric from {spec!r}")


class MetricSet:
    """The metrics of one split, with the counters that timing metrics read."""

    def __init__(
        self, specs: Iterable[Any] = (), optimizer: torch.optim.Optimizer | None = None, step_values: bool = False
    ) -> None:
        self.metrics: list[Metric] = [make_metric(s, step_values) for s in specs]
        self.batch_metrics = [m for m in self.metrics if type(m).update is not Metric.update]
        #: the loop times its waits for data (the `data_wait` metric is asked for)
        self.times_data = any(isinstance(m, DataWait) for m in self.metrics)
        self.grad_norm = next((m for m in self.metrics if isinstance(m, GradNorm)), None)
        #: every other scalar a step returns by name is logged as a metric of that name
        self.adopt_values = True
        self._seen: frozenset[str] = frozenset()
        self.ctx = Context()
        self.ctx.optimizer = optimizer
        self._window_t0 = self._phase_t0 = time.perf_counter()
        self.reducer: Callable[[list[float]], list[float]] | None = None  # distributed: sums over every rank

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def start_phase(self) -> None:
        for m in self.metrics:
            m.reset()
        c = self.ctx
        c.window_items = c.window_steps = c.phase_items = c.phase_steps = 0
        c.phase_time = c.window_wait = c.phase_wait = 0.0
        self._window_t0 = self._phase_t0 = time.perf_counter()

    def update(self, out: StepOutput, n: int) -> None:
        if out.extras and self.adopt_values and out.extras.keys() != self._seen:
            self._adopt(out.extras)
        for m in self.batch_metrics:
            m.update(out, n)
        self.ctx.window_items += n

    def _adopt(self, extras: dict[str, Any]) -> None:
        """Log the named scalars a step returns (`{"loss": ..., "perplexity": ...}`) that no metric
        names yet, from this batch on."""
        self._seen = frozenset(extras)
        names = set(self.names)
        for name, value in extras.items():
            scalar = (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
                isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point()
            )
            if scalar and name not in names and isinstance(name, str) and name.isidentifier():
                metric = StepValue(name)
                self.metrics.append(metric)
                self.batch_metrics.append(metric)

    def step_done(self) -> None:
        self.ctx.window_steps += 1

    def _close_window(self) -> None:
        now = time.perf_counter()
        c = self.ctx
        c.window_time = now - self._window_t0
        c.phase_time += c.window_time
        c.phase_items += c.window_items
        c.phase_steps += c.window_steps
        c.phase_wait += c.window_wait
        self._window_t0 = now

    def _reduce(self, reducer: Callable[[list[float]], list[float]]) -> None:
        """Distributed: replace this rank's window (ratio sums and counts, items) by every rank's sum."""
        ratios = [m for m in self.metrics if isinstance(m, _Ratio)]
        vals: list[float] = []
        for m in ratios:
            vals.extend(m.window_sum())
        vals.append(self.ctx.window_items)
        out = reducer(vals)
        for i, m in enumerate(ratios):
            m.set_window(out[2 * i], int(out[2 * i + 1]))
        self.ctx.window_items = int(out[-1])

    def read_window(self) -> dict[str, float]:
        """Values since the last read (syncs the device once per metric)."""
        if self.reducer is not None:
            self._reduce(self.reducer)
        self._close_window()
        out = {}
        for m in self.metrics:
            v = m.window(self.ctx)
            if v is not None:
                out[m.name] = v
        self.ctx.window_items = self.ctx.window_steps = 0
        self.ctx.window_wait = 0.0
        return out

    def read_phase(self) -> dict[str, float]:
        if self.reducer is not None:
            self._reduce(self.reducer)
        self._close_window()
        self.ctx.window_items = self.ctx.window_steps = 0
        self.ctx.window_wait = 0.0
        out = {}
        for m in self.metrics:
            v = m.phase(self.ctx)
            if v is not None:
                out[m.name] = v
        return out

    def pause_clock(self, seconds: float) -> None:
        """Leave time spent paused or checkpointing out of throughput."""
        self._window_t0 += seconds

    def state_dict(self) -> dict[str, Any]:
        c = self.ctx
        return {
            "metrics": {m.name: m.state_dict() for m in self.metrics},
            "counters": [c.window_items, c.window_steps, c.phase_items, c.phase_steps, c.phase_time],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        names = set(self.names)
        for name, saved in state["metrics"].items():  # values the step returned, adopted before the save
            if self.adopt_values and name not in names and set(saved) == {"window", "window_count", "total", "count"}:
                metric = StepValue(name)
                self.metrics.append(metric)
                self.batch_metrics.append(metric)
        for m in self.metrics:
            if m.name in state["metrics"]:
                m.load_state_dict(state["metrics"][m.name])
        c = self.ctx
        c.window_items, c.window_steps, c.phase_items, c.phase_steps, c.phase_time = state["counters"]
        self._window_t0 = time.perf_counter()
