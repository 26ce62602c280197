"""FLOPs for the `tflops` and `mfu` metrics: one training step counted once, and the peak of a device.

`StepFlops` counts the FLOPs of one optimizer step with `torch.utils.flop_counter.FlopCounterMode`:
the first training batch's forward and backward, times the batches of a step (grad_accumulation).
It only watches (a module forward pre-hook and optimizer step pre-hooks, removed once the batch is
counted): the batch is the run's own, trained as usual, so the count changes neither the results nor
the random streams. `peak_tflops_of(name)` reads the dense bf16 peak of a known GPU from a table.
`setup` hands both to the metrics that ask for them. Must not import textual.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, cast
from collections.abc import Callable, Iterable

import torch

from torch.utils.hooks import RemovableHandle

from .events import PhaseCompleted, PhaseStarted, RunFailed, RunFinished

if TYPE_CHECKING:  # imported where used: the counter when a batch is counted, the metrics by `setup`
    from torch.utils.flop_counter import FlopCounterMode

    from .metrics import MetricSet

#: dense (no 2:4 sparsity) bf16 tensor-core peak TFLOP/s per device, from the vendors' datasheets
#: (their figures "with sparsity" halved). First match wins: a specific name before a general one.
#: Cards without bf16 (V100, T4) list their fp16 tensor-core peak. Matched against
#: torch.cuda.get_device_name, lowercased.
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"gh200", 989.0),
    (r"gb200", 2500.0),
    (r"b200", 2250.0),
    (r"h200 nvl", 835.0),
    (r"h200", 989.0),
    (r"h100 nvl", 835.0),
    (r"h100.*(pcie|hbm2e)", 756.0),
    (r"h100", 989.0),  # SXM ("NVIDIA H100 80GB HBM3")
    (r"h800.*pcie", 756.0),
    (r"h800", 989.0),
    (r"\bh20\b", 148.0),
    (r"\ba100\b|\ba800\b", 312.0),  # SXM and PCIe alike
    (r"\ba10g\b", 125.0),  # AWS's A10G: NVIDIA publishes no sheet; A10's figure (as Lightning uses)
    (r"\ba10\b", 125.0),
    (r"\ba30\b", 165.0),
    (r"\ba40\b", 149.7),
    (r"l40s", 362.0),
    (r"\bl40\b", 181.0),
    (r"\bl4\b", 121.0),
    (r"rtx a6000", 154.8),
    (r"rtx 4090", 165.2),  # with fp32 accumulation, as torch's bf16 matmuls run (330 with fp16's)
    (r"rtx 3090", 71.0),
    (r"v100.*pcie", 112.0),
    (r"v100", 125.0),
    (r"\bt4\b", 65.0),
    (r"mi325x|mi300x", 1307.4),
    (r"mi250x", 383.0),
    (r"mi250", 362.1),
)


def peak_tflops_of(device_name: str) -> float | None:
    """The dense bf16 peak TFLOP/s of a GPU by its name ("NVIDIA H100 80GB HBM3" -> 989.0); None
    for a name the table does not know."""
    name = device_name.lower()
    for pattern, peak in PEAK_TFLOPS:
        if re.search(pattern, name):
            return peak
    return None


def device_peak_tflops(device: torch.device) -> float | None:
    """The table's peak for `device` (a CUDA device); None on a CPU, MPS or an unknown GPU."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return peak_tflops_of(torch.cuda.get_device_name(device))


def check_amount(name: str, value: Any) -> float:
    """`value` as a float of 0 or more; ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a number of 0 or more, not {value!r}")
    return float(value)


def peak_for(device: torch.device, peak_tflops: float, key: str = "peak_tflops") -> float:
    """The peak TFLOP/s of one device for `mfu`: the one given, else the GPU table's; ValueError when
    neither (a CPU, MPS, a GPU the table does not know)."""
    if peak_tflops:
        return peak_tflops
    peak = device_peak_tflops(device)
    if peak is None:
        what = (
            f"the GPU {torch.cuda.get_device_name(device)!r} is not in tuitrain's table"
            if device.type == "cuda"
            else f"there is no table for {device.type}"
        )
        raise ValueError(
            f"metric 'mfu' needs the device's peak TFLOP/s and {what}: set {key} (one "
            "device's dense peak in the precision you train in)"
        )
    return peak


class StepFlops:
    """The FLOPs of one optimizer step of this process, counted once with FlopCounterMode over the
    first training batch's forward and backward, times `batches_per_step`.

    A bus callback (`on_event`): it watches only while a training phase runs (PhaseStarted to
    PhaseCompleted), until the count is done. Counting starts at the first forward call of a module
    in training mode while `position()` is not None, and stops at the first forward call or optimizer
    step after `position()` has changed (the batch is done), or when the value is read. `position`
    says where training is ((epoch, batch) while training, else None).

    A compiled model is watched around its compiled call (a hook inside it would run within the
    compiled code and see the forward only): `nn.Module.compile`'s `_compiled_call_impl`, a
    `torch.compile(model)` wrapper's `forward`. The counted batch runs uncompiled (the wrapped module
    itself): a first compiled call under FlopCounterMode, a dispatch mode, would have dynamo pass over
    the model's code for good, and the whole run would train uncompiled."""

    def __init__(
        self,
        models: Iterable[torch.nn.Module],
        optimizers: Iterable[torch.optim.Optimizer],
        position: Callable[[], Any],
        batches_per_step: int = 1,
    ) -> None:
        self.models, self.optimizers = list(models), list(optimizers)
        self.position = position
        self.batches_per_step = batches_per_step
        self.flops: float | None = None  # per optimizer step, once counted
        self._counter: FlopCounterMode | None = None
        self._at: Any = None  # the position where counting began
        self._hooks: list[RemovableHandle] = []
        self._swapped: list[tuple[torch.nn.Module, str, Any]] = []  # (module, attribute, what it held)

    def on_event(self, event: Any, state: Any) -> None:
        if isinstance(event, PhaseStarted) and event.split == "train" and self.flops is None and not self.watching:
            self.watch()
        elif (isinstance(event, PhaseCompleted) and event.split == "train") or isinstance(
            event, (RunFinished, RunFailed)
        ):
            self.finish()  # a phase or run that ends within the counted batch leaves no mode behind
            self.close()

    @property
    def watching(self) -> bool:
        return bool(self._hooks or self._swapped)

    def watch(self) -> None:
        in_place = [m for m in self.models if getattr(m, "_compiled_call_impl", None) is not None]
        if in_place or any(hasattr(m, "_orig_mod") for m in self.models):  # torch.compile(m) wraps it
            # no global hook: compiled code would run it (and torch.compile(m) warns of it)
            for m in self.models:
                if any(m is c for c in in_place):
                    self._swap(m, "_compiled_call_impl", m._call_impl)
                elif hasattr(m, "_orig_mod"):  # the wrapper's forward is the compiled call of the module
                    self._swap(m, "forward", cast(torch.nn.Module, m._orig_mod))
                else:
                    self._hooks.append(m.register_forward_pre_hook(self._on_forward))
        else:  # any module: a train_step may call the model's parts rather than the model
            self._hooks.append(torch.nn.modules.module.register_module_forward_pre_hook(self._on_forward))
        for opt in self.optimizers:
            self._hooks.append(opt.register_step_pre_hook(self._on_step))

    def _swap(self, module: torch.nn.Module, attribute: str, uncompiled: Callable[..., Any]) -> None:
        """`module.<attribute>` (its compiled call) watched; while the batch is counted, `uncompiled` runs."""
        held = module.__dict__.get(attribute)  # an instance attribute (None: the class's)
        compiled = getattr(module, attribute)
        self._swapped.append((module, attribute, held))

        def watched(*args: Any, **kwargs: Any) -> Any:
            self._on_forward(module, args)
            return (uncompiled if self._counter is not None else compiled)(*args, **kwargs)

        setattr(module, attribute, watched)

    def _on_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self._counter is None:
            if module.training:
                at = self.position()
                if at is not None:
                    self._begin(at)
        elif self.position() != self._at:
            self.finish()

    def _on_step(self, *_: Any) -> None:
        if self._counter is not None and self.position() != self._at:
            self.finish()

    def _begin(self, at: Any) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._at = at
        self._counter = FlopCounterMode(display=False)
        self._counter.__enter__()  # type: ignore[no-untyped-call]  # unannotated in torch

    def finish(self) -> None:
        """Stop counting (what was counted is the batch) and stop watching."""
        if self._counter is not None:
            counter, self._counter = self._counter, None
            counter.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # unannotated in torch
            self.flops = float(counter.get_total_flops()) * self.batches_per_step
        if self.flops is not None:
            self.close()

    def close(self) -> None:
        """Stop watching (the hooks removed, compiled calls given back)."""
        if self._counter is not None:
            counter, self._counter = self._counter, None
            counter.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # unannotated in torch
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for m, attribute, held in self._swapped:
            if held is None:
                delattr(m, attribute)
            else:
                setattr(m, attribute, held)
        self._swapped = []

    def per_step(self) -> float | None:
        """The FLOPs of one optimizer step; None before the first batch is counted."""
        if self._counter is not None:
            self.finish()
        return self.flops


class GivenFlops:
    """FLOPs per optimizer step given by the user (`flops_per_step`)."""

    def __init__(self, flops: float) -> None:
        self.flops = flops

    def per_step(self) -> float:
        return self.flops


def setup(
    metric_sets: dict[str, MetricSet],
    device: torch.device,
    flops_per_step: Any,
    peak_tflops: Any,
    *,
    models: Iterable[torch.nn.Module],
    optimizers: Iterable[torch.optim.Optimizer],
    position: Callable[[], Any],
    batches_per_step: int,
) -> StepFlops | None:
    """Hand the FLOPs per step, the peak and the device to the `tflops`, `mfu` and `max_memory`
    metrics of `metric_sets` ({"train": MetricSet, "valid": ...}; the FLOPs to "train" only: a
    validation has no optimizer step). Returns the StepFlops that counts the first batch when one is
    needed; ValueError for an amount that is not a number of 0 or more, or `mfu` with no peak known."""
    from .metrics import MaxMemory, Mfu, Tflops

    flops_per_step = check_amount("flops_per_step", flops_per_step)
    peak_tflops = check_amount("peak_tflops", peak_tflops)
    every = [m for ms in metric_sets.values() for m in ms.metrics]
    peak = peak_for(device, peak_tflops) if any(isinstance(m, Mfu) for m in every) else peak_tflops
    for m in every:
        if isinstance(m, MaxMemory):
            m.device = device
    train = [m for m in metric_sets["train"].metrics if isinstance(m, Tflops)] if "train" in metric_sets else []
    if not train:
        return None
    source = GivenFlops(flops_per_step) if flops_per_step else StepFlops(models, optimizers, position, batches_per_step)
    for m in train:  # Mfu is a Tflops
        m.flops, m.peak = source, peak
    return source if isinstance(source, StepFlops) else None
