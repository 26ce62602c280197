"""The Learner's optimization side: precision (autocast, gradient scaler), backward, optimizer steps
with clipping and schedulers, and the helpers a phase of one's own calls (`step_optimizer`, `fire`).

A mixin of `Learner` (learner.py). Must not import textual.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from .events import StepPoint


class OptimizationMixin:
    """Precision and optimizer stepping for `Learner`; uses its device, models, optimizers,
    schedulers, clip_grad_norm, phase, state and bus."""

    def _setup_precision(self, precision: str) -> None:
        self.precision = precision
        self.scaler = None
        self._autocast_dtype = None
        if precision in ("32", "32-true", "fp32"):
            return
        if precision in ("16-mixed", "16"):
            if self.device.type == "cuda":
                self._autocast_dtype = torch.float16
                self.scaler = torch.amp.GradScaler("cuda")
                return
            warnings.warn(f"precision '16-mixed' needs CUDA; using bf16-mixed on {self.device.type}",
                          stacklevel=3)
            self.precision = "bf16-mixed"
        if self.precision in ("bf16-mixed", "bf16"):
            self._autocast_dtype = torch.bfloat16
            if self.device.type == "cpu" and cpu_bf16() is False:
                self.notes.append("precision bf16-mixed: this CPU has no native bf16 instructions, so bf16 is "
                                  "emulated and likely slower than precision \"32\"")
            return
        raise ValueError(f"unknown precision {precision!r}: use '32', 'bf16-mixed' or '16-mixed'")

    _NO_AUTOCAST = contextlib.nullcontext()  # reusable: one less object per step

    def autocast(self):
        if self.before_micro_batch is not None:  # a strategy's gradient sync for this micro-batch
            self.before_micro_batch(self)
        if self._autocast_dtype is None:
            return self._NO_AUTOCAST
        return torch.autocast(device_type=self.device.type, dtype=self._autocast_dtype)

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def _grad_norm_due(self) -> bool:
        """`grad_norm` is asked for and the step being taken is a logged one."""
        return self._grad_norm is not None and (self.state.step + 1) % self.log_every_n_steps == 0

    def _clip_and_measure(self, opt, params) -> bool:
        """Clip the gradients (train.clip_grad_norm) and, on a logged step, keep their total norm
        before clipping for `grad_norm` (a device tensor: read when the step is logged). The `[watch]`
        rules judge the norm on logged steps (and on every step where clipping reads it on the CPU).
        True: a rule says the update must not be applied."""
        due = self._grad_norm_due()
        every = self.judge_grads_every
        judge = every and ((self.state.step + 1) % every == 0 or (self.clip_grad_norm > 0 and self.check_every_step))
        if self.clip_grad_norm <= 0 and not due and not judge:
            return False
        if self.scaler is not None:
            self.scaler.unscale_(opt)
            self._scaler_unscaled = True
        if self.clip_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if due:
            self._grad_norm.add(norm)
        if judge:
            s = self.state
            return self.judge_grad_norm(float(norm), s, list(range(max(s.batch - self.grad_accumulation, 0), s.batch)))
        return False

    def optimizer_step(self) -> bool | None:
        """Clip, step, zero the gradients, step a per-step scheduler. False: a `[watch]` rule judged the
        gradients and the update was not applied (nothing stepped; the caller's step counter stays)."""
        opt = self.optimizer
        if self._clip_and_measure(opt, list(self.raw_model.parameters())):
            self.skip_update()
            return False
        self._scaler_unscaled = False
        if self.scaler is not None:
            self.scaler.step(opt)
            self.scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()

    def loop_parts(self):
        """(autocast or None, backward, optimizer step or None) for a training loop to bind once per
        epoch: None where the plain form applies (no autocast; `opt.step()` then `zero_grad()` with no
        clipping, scaler or per-step scheduler), so the loop makes no call it does not need. A
        subclass that overrides one of these methods keeps it."""
        base = OptimizationMixin
        cls = type(self)
        amp = self.autocast if (cls.autocast is not base.autocast or self._autocast_dtype is not None
                                or self.world_size > 1) else None
        plain_backward = cls.backward is base.backward and self.scaler is None
        backward = torch.Tensor.backward if plain_backward else self.backward
        plain_step = (cls.optimizer_step is base.optimizer_step and self.scaler is None and self.clip_grad_norm <= 0
                      and self._grad_norm is None
                      and not (self.scheduler is not None and self.scheduler_interval == "step"))
        return amp, backward, None if plain_step else self.optimizer_step

    def fire(self, point: str, detail: str = "") -> None:
        """Announce a point inside the current step ("loss", "backward_started", "backward_completed",
        "optimizer_stepped" or a name of your own) to the callbacks that take per-step events; costs
        nothing when none does."""
        if self.bus.wants_steps:
            s = self.state
            self.bus.emit_step(StepPoint(point=point, phase=s.phase, epoch=s.epoch, step=s.step + 1, detail=detail))

    def zero_grad(self, name: str | None = None) -> None:
        """Clear the gradients of one optimizer's parameters (all optimizers when `name` is None)."""
        for opt in (self.optimizers.values() if name is None else (self._optimizer(name),)):
            opt.zero_grad(set_to_none=True)

    def step_optimizer(self, name: str | None = None) -> None:
        """For a phase with its own step: clip, step and zero one optimizer, then its step-interval
        scheduler. `name` is the optimizer's name in the config (`[optimizer.NAME]`); None: the only one."""
        phase = self.phase
        if phase is not None and not phase.training:
            raise RuntimeError(f"step_optimizer called in the {phase.name!r} phase, which is not a training phase")
        opt = self._optimizer(name)
        key = name if name is not None else next(iter(self.optimizers))
        if self._clip_and_measure(opt, [p for group in opt.param_groups for p in group["params"]]):
            opt.zero_grad(set_to_none=True)  # a [watch] rule: this optimizer's update is not applied
            return
        if self.scaler is not None:
            self.scaler.step(opt)
            self._scaler_stepped = True  # scaler.update() once per training step, after every optimizer
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        sched = self.schedulers.get(key)
        if sched is not None and self.scheduler_intervals.get(key) == "step":
            sched.step()

    def _optimizer(self, name: str | None) -> torch.optim.Optimizer:
        if name is None:
            if len(self.optimizers) != 1:
                raise ValueError(f"several optimizers ({', '.join(self.optimizers)}): name the one to step")
            return self.optimizer
        try:
            return self.optimizers[name]
        except KeyError:
            raise KeyError(f"no optimizer {name!r}; the optimizers are {', '.join(self.optimizers) or 'none'}") from None

    def end_manual_step(self) -> None:
        """After a phase's own step: the gradient scaler's update, once for every optimizer stepped."""
        if self.scaler is not None and getattr(self, "_scaler_stepped", False):
            self.scaler.update()
            self._scaler_stepped = False


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


def takes_model(fn) -> bool:
    """Whether an optimizer factory's first parameter is named `model`: it is then called with the
    model itself (to build its own parameter groups), not with the parameters."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0].name == "model"


def parameter_groups(model: torch.nn.Module, no_decay) -> list[dict]:
    """Two groups for an optimizer: parameters whose names contain none of the `no_decay` substrings
    (the optimizer's weight decay), and the others with weight_decay 0 (biases and norms, the usual
    recipe for transformers). A group left empty is left out."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (plain if any(s in name for s in no_decay) else decay).append(p)
    groups = [{"params": decay}, {"params": plain, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]
