"""The Learner's optimization: precision (autocast, the gradient scaler), backward, optimizer steps with
clipping and schedulers, and the helpers a phase of one's own calls through the learner
(`learner.step_optimizer`, `learner.zero_grad`, `learner.end_manual_step`).

`Precision` and `Optimization` are collaborators the Learner owns (`learner.precision`,
`learner.optimization`); each is given what it works on when it is built. Must not import textual.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # the learner's other collaborators, which import this module's neighbours
    from .learner_health import HealthGuard
    from .metrics import GradNorm
    from .phases import Phase
    from .state import TrainState


class Precision:
    """The run's precision: the autocast dtype and, for float16 on CUDA, the gradient scaler.
    `unscaled`/`stepped` keep the scaler's per-step record (see `HealthGuard.skip_update`)."""

    NO_AUTOCAST = contextlib.nullcontext()  # reusable: one less object per step

    def __init__(self, precision: str, device: torch.device, notes: list[str]) -> None:
        self.device = device
        self.name = precision
        self.scaler: torch.amp.GradScaler | None = None
        self.dtype: torch.dtype | None = None
        self.unscaled = False  # scaler.unscale_ was called in this step
        self.stepped = False  # a phase's own step stepped an optimizer through the scaler
        if precision in ("32", "32-true", "fp32"):
            return
        if precision in ("16-mixed", "16"):
            if device.type == "cuda":
                self.dtype = torch.float16
                self.scaler = torch.amp.GradScaler("cuda")
                return
            warnings.warn(f"precision '16-mixed' needs CUDA; using bf16-mixed on {device.type}", stacklevel=3)
            self.name = "bf16-mixed"
        if self.name in ("bf16-mixed", "bf16"):
            self.dtype = torch.bfloat16
            if device.type == "cpu" and cpu_bf16() is False:
                notes.append(
                    "precision bf16-mixed: this CPU has no native bf16 instructions, so bf16 is "
                    'emulated and likely slower than precision "32"'
                )
            return
        raise ValueError(f"unknown precision {precision!r}: use '32', 'bf16-mixed' or '16-mixed'")

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return self.NO_AUTOCAST
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]  # unannotated in torch
        else:
            loss.backward()  # type: ignore[no-untyped-call]  # unannotated in torch


class Optimization:
    """Steps the optimizers: clipping (and the gradient norm for `grad_norm` and the `[watch]` rules,
    judged by `guard`, which also clears an update not applied), the scaler, zeroing, step-interval
    schedulers."""

    def __init__(
        self,
        *,
        model: torch.nn.Module,
        optimizers: dict[str, torch.optim.Optimizer],
        schedulers: dict[str, Any],  # torch's or any with step() (schedules.py reads them by duck typing)
        intervals: dict[str, str],
        precision: Precision,
        state: TrainState,
        clip_grad_norm: float,
        accumulation: int,
        log_every: int,
        grad_norm: GradNorm | None,
        guard: HealthGuard,
    ) -> None:
        self.model, self.optimizers, self.schedulers, self.intervals = model, optimizers, schedulers, intervals
        self.optimizer = next(iter(optimizers.values()), None)
        self._first = next(iter(optimizers), "model")
        self.precision, self.state, self.guard = precision, state, guard
        self.clip_grad_norm, self.accumulation, self.log_every = clip_grad_norm, accumulation, log_every
        self.grad_norm = grad_norm  # the `grad_norm` metric, when asked for (None: not)

    @property
    def scheduler(self) -> Any:
        """The default training step's scheduler: the first optimizer's (None: none)."""
        return self.schedulers.get(self._first)

    @property
    def scheduler_interval(self) -> str:
        return self.intervals.get(self._first, "step")

    @property
    def plain(self) -> bool:
        """`opt.step()` then `zero_grad()` is the whole optimizer step: no clipping, scaler, measured
        norm or per-step scheduler."""
        return (
            self.precision.scaler is None
            and self.clip_grad_norm <= 0
            and self.grad_norm is None
            and not (self.scheduler is not None and self.scheduler_interval == "step")
        )

    def _clip_and_measure(self, opt: torch.optim.Optimizer, params: list[torch.Tensor]) -> bool:
        """Clip the gradients (train.clip_grad_norm) and, on a logged step, keep their total norm
        before clipping for `grad_norm` (a device tensor: read when the step is logged). The `[watch]`
        rules judge the norm on logged steps (and on every step where clipping reads it on the CPU).
        True: a rule says the update must not be applied."""
        step = self.state.step + 1
        due = self.grad_norm is not None and step % self.log_every == 0
        guard = self.guard
        every = guard.judge_grads_every
        judge = every and (step % every == 0 or (self.clip_grad_norm > 0 and guard.check_every_step))
        if self.clip_grad_norm <= 0 and not due and not judge:
            return False
        if self.precision.scaler is not None:
            self.precision.scaler.unscale_(opt)
            self.precision.unscaled = True
        if self.clip_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if due and self.grad_norm is not None:  # (due: it is)
            self.grad_norm.add(norm)
        if judge:
            s = self.state
            value = float(norm)
            if self.precision.scaler is not None and not math.isfinite(value):
                # float16's scaler overflowed: it skips this update itself and lowers its scale (after a
                # growth of the scale, now and then): its own business, not a fault for the [watch] rules
                return False
            return guard.judge_grad_norm(value, s, list(range(max(s.batch - self.accumulation, 0), s.batch)))
        return False

    def optimizer_step(self) -> bool | None:
        """Clip, step, zero the gradients, step a per-step scheduler. False: a `[watch]` rule judged the
        gradients and the update was not applied (nothing stepped; the caller's step counter stays)."""
        opt = self.optimizer
        if opt is None:
            raise RuntimeError("optimizer_step: this learner has no optimizer")
        if self._clip_and_measure(opt, list(self.model.parameters())):
            self.guard.skip_update()
            return False
        self.precision.unscaled = False
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()
        return None

    def zero_grad(self, name: str | None = None) -> None:
        for opt in self.optimizers.values() if name is None else (self.named(name),):
            opt.zero_grad(set_to_none=True)

    def step_optimizer(self, name: str | None, phase: Phase | None) -> None:
        """A phase's own step (`phase`, the one running): clip, step and zero one optimizer, then its
        step-interval scheduler."""
        if phase is not None and not phase.training:
            raise RuntimeError(f"step_optimizer called in the {phase.name!r} phase, which is not a training phase")
        opt = self.named(name)
        key = name if name is not None else next(iter(self.optimizers))
        if self._clip_and_measure(opt, [p for group in opt.param_groups for p in group["params"]]):
            opt.zero_grad(set_to_none=True)  # a [watch] rule: this optimizer's update is not applied
            return
        if self.precision.scaler is not None:
            self.precision.scaler.step(opt)
            self.precision.stepped = True  # scaler.update() once per training step, after every optimizer
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        sched = self.schedulers.get(key)
        if sched is not None and self.intervals.get(key) == "step":
            sched.step()

    def named(self, name: str | None) -> torch.optim.Optimizer:
        if name is None:
            if len(self.optimizers) != 1:
                raise ValueError(f"several optimizers ({', '.join(self.optimizers)}): name the one to step")
            return next(iter(self.optimizers.values()))  # the only one
        try:
            return self.optimizers[name]
        except KeyError:
            names = ", ".join(self.optimizers) or "none"
            raise KeyError(f"no optimizer {name!r}; the optimizers are {names}") from None

    def end_manual_step(self) -> None:
        """After a phase's own step: the gradient scaler's update, once for every optimizer stepped."""
        if self.precision.scaler is not None and self.precision.stepped:
            self.precision.scaler.update()
            self.precision.stepped = False


def cpu_bf16() -> bool | None:
    """Whether this CPU computes bf16 natively (x86 AVX512-BF16 or AMX, Arm BF16); None: unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set()
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        return None
    if not flags:
        return None
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def takes_model(fn: Callable[..., Any]) -> bool:
    """Whether an optimizer factory's first parameter is named `model`: it is then called with the
    model itself (to build its own parameter groups), not with the parameters."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0].name == "model"


def parameter_groups(model: torch.nn.Module, no_decay: Collection[str]) -> list[dict[str, Any]]:
    """Two groups for an optimizer: parameters whose names contain none of the `no_decay` substrings
    (the optimizer's weight decay), and the others with weight_decay 0 (biases and norms, the usual
    recipe for transformers). A group left empty is left out."""
    decay: list[torch.nn.Parameter] = []
    plain: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (plain if any(s in name for s in no_decay) else decay).append(p)
    groups: list[dict[str, Any]] = [{"params": decay}, {"params": plain, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]
