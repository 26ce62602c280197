"""The loops over one epoch's batches: `train_epoch` (and `_plain_epoch`, the same loop step for step for
the common case, without the calls that case does not need) and `valid_epoch`. A phase (phases.py) is
the step (`Phase.step`: one batch in, a StepOutput out) and says which loop runs it (`Phase.run`).

Each training loop, per batch: the step under autocast, the backward (divided over an accumulation
group), the [watch] rules on the loss and, at a group's end, on the gradients, the optimizer step (or
the update skipped), then `learner.after_step` - the one place for what happens after every optimizer
step: the log every N steps, a due checkpoint, the step boundary (`learner.at_boundary`: control
requests, pause, a due validation or checkpoint) and max_steps. Must not import textual.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import torch

from .batches import batch_size_of, move_to
from .callbacks import STEP_SAMPLE_INTERVAL
from .events import StepCompleted, StepStarted
from .learner_health import GradNorm
from .metrics import Loss, StepOutput
from .state import CancelEpoch, CancelStep

if TYPE_CHECKING:
    from .learner import Learner
    from .phases import TrainPhase, ValidPhase
    from .state import TrainState


class StepSampler:
    """For callbacks subscribed with `steps="sampled"`: the first FIRST steps of a phase, then a
    StepCompleted every STEP_SAMPLE_INTERVAL seconds, each carrying the items of every step since the
    last one (a screen measures a phase's speed from a few steps, even when the phase is short).
    `of(bus, phase)` is None when no callback needs it."""

    FIRST = 3
    __slots__ = ("emit", "phase", "items", "due", "first", "held")

    def __init__(self, emit, phase: str) -> None:
        self.emit, self.phase = emit, phase
        self.items = 0
        self.due = 0.0
        self.first = self.FIRST
        self.held: tuple[int, int, int] | None = None  # the last step, when not reported

    @classmethod
    def of(cls, bus, phase: str) -> "StepSampler | None":
        return cls(bus.emit_step, phase) if bus.wants_sampled_steps else None

    def __call__(self, epoch: int, step: int, batch: int, items: int) -> None:
        self.items += items
        now = time.perf_counter()
        if now >= self.due or self.first:
            self.first = max(0, self.first - 1)
            self.due = now + STEP_SAMPLE_INTERVAL
            self.emit(StepCompleted(phase=self.phase, epoch=epoch, step=step, batch=batch, items=self.items))
            self.items = 0
            self.held = None
        else:
            self.held = (epoch, step, batch)

    def flush(self) -> None:
        """At the phase's end: report its last step when it was held back, so that a phase shorter
        than the interval is measured from its first steps to its last, not by its first steps alone
        (slower, after validation or a checkpoint)."""
        if self.held is not None:
            epoch, step, batch = self.held
            self.held = None
            self.emit(StepCompleted(phase=self.phase, epoch=epoch, step=step, batch=batch, items=self.items))
            self.items = 0


def timed(batches, ctx):
    """`batches`, adding the seconds each one kept the loop waiting to `ctx.window_wait` (no device
    sync: the clock runs while the loader produces the batch, not while the device computes)."""
    clock = time.perf_counter
    it = iter(batches)
    try:
        while True:
            t0 = clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            ctx.window_wait += clock() - t0
            yield batch
    finally:  # a loop that breaks early closes the loader's own iterator too
        close = getattr(it, "close", None)
        if close is not None:
            close()


def train_epoch(phase: "TrainPhase", learner: "Learner", loader, state: "TrainState", start_batch: int = 0) -> dict:
    metrics = learner.metric_sets[phase.split]
    bus = learner.bus
    wants_steps = bus.wants_steps
    total = loader.batches_per_epoch()
    manual = phase.manual_optimization
    accum = 1 if manual else learner.grad_accumulation
    check_finite = learner.guard.check_every_step
    phase.begin(learner, state, metrics, total, fresh=start_batch == 0)
    autocast, backward, optimizer_step = learner.loop_parts()
    if (accum == 1 and not manual and autocast is None and optimizer_step is None and not wants_steps
            and phase._plain_parts(learner) is not None and not metrics.times_data
            and all(type(m) is Loss for m in metrics.batch_metrics)):
        return _plain_epoch(phase, learner, loader, state, start_batch, metrics, total)
    i = start_batch
    in_group = 0
    group_div = float(min(accum, total - i)) if total else float(accum)
    # locals: this loop runs per batch, and attribute lookups are most of its own cost
    step_fn, items_of, update, ctx = phase.bound_step(learner), phase.items_of, metrics.update, metrics.ctx
    if optimizer_step is None:  # the plain form, inlined below: step, then clear the gradients
        opt_step, zero_grad = learner.optimizer.step, learner.optimizer.zero_grad
    move, device, non_blocking = learner.move_batches, learner.device, learner.non_blocking
    after_step = learner.after_step  # the log, a due checkpoint, the step boundary, max_steps
    sample = StepSampler.of(bus, phase.name)
    n = group_items = 0  # items of this batch, of this optimizer step's batches
    # the [watch] rules (health.py): the loss judged every step where it is on the host anyway, else
    # on the steps that log; the gradients on the steps that log (an optimizer_step judges its own)
    judge_loss, log_every = learner.guard.judge_loss, learner.log_every_n_steps
    judge_logged = learner.guard.judge_logged_loss
    grads_every = learner.guard.judge_grads_every if optimizer_step is None and not manual else 0
    norm_of = GradNorm(learner.raw_model.parameters()) if grads_every else None  # bound once, as step_fn is
    skip_group = False  # a batch of this optimizer step's group is judged bad: its update is not applied
    passed_over = {tuple(b) for b in state.skip_batches} or None  # a rollback's batches
    epoch = state.epoch
    batches = loader.epoch_iter(state.epoch, start_batch)
    if metrics.times_data:
        batches = timed(batches, ctx)
    try:
        for batch in batches:
            if passed_over is not None and (epoch, i) in passed_over:
                i += 1
                state.batch = i
                continue
            if wants_steps:
                bus.emit_step(StepStarted(phase=phase.name, epoch=state.epoch, step=state.step + 1, batch=i))
            if move:
                batch = move_to(batch, device, non_blocking)
            try:
                if autocast is None:
                    out = step_fn(batch)
                else:
                    with autocast():
                        out = step_fn(batch)
                if type(out) is not StepOutput:  # a user's step may return a dict or a tensor
                    out = StepOutput.of(out)
                loss = out.loss
                n = items_of(out, batch)
                if manual:
                    learner.end_manual_step()
                else:
                    backward(loss / group_div if group_div != 1.0 else loss)
                if loss is not None and (check_finite or (judge_logged and (state.step + 1) % log_every == 0)):
                    v = out.value = loss.item()
                    if judge_loss(v, state, i):
                        skip_group = True
                if not skip_group:
                    update(out, n)
                    group_items += n
                state.last = out
            except CancelStep:
                pass
            i += 1
            in_group += 1
            state.batch = i
            if in_group == accum or i == total:
                if not skip_group and grads_every and (state.step + 1) % grads_every == 0:
                    skip_group = learner.guard.judge_grads(norm_of, state, list(range(i - in_group, i)))
                if skip_group:
                    pass
                elif manual:
                    pass
                elif optimizer_step is None:
                    opt_step()
                    zero_grad(set_to_none=True)
                elif optimizer_step() is False:  # a health rule judged the gradients: not applied
                    skip_group = True
                if skip_group:  # the update not applied: the step counter stays, as if the batches had not come
                    if not manual:
                        learner.guard.skip_update()
                    skip_group = False
                    in_group = group_items = 0
                    if accum > 1:
                        group_div = float(min(accum, total - i)) if total else float(accum)
                    continue
                step = state.step = state.step + 1
                ctx.window_steps += 1
                in_group = 0
                if accum > 1:
                    group_div = float(min(accum, total - i)) if total else float(accum)
                if wants_steps:
                    bus.emit_step(StepCompleted(phase=phase.name, epoch=state.epoch, step=step, batch=i,
                                                items=group_items))
                elif sample is not None:
                    sample(state.epoch, step, i, group_items)
                group_items = 0
                if after_step(metrics, phase.split, state, i, total):
                    break
    except CancelEpoch:
        pass
    if in_group:  # an iterable of unknown length ended inside a group: still step
        if not manual:
            learner.optimizer_step()
        state.step += 1
        metrics.step_done()
    if sample is not None:
        sample.flush()
    return phase.finish(learner, state, metrics)


def _plain_epoch(phase: "TrainPhase", learner: "Learner", loader, state: "TrainState", start_batch: int, metrics,
                 total: int) -> dict:
    """`run` for the common case, step for step the same: the default (inputs, targets) step, a
    plain optimizer step per batch, the loss as the only per-batch metric and no callback that
    takes every step (sampled ones may). It makes no call that case does not need (no StepOutput
    and no metric dispatch per batch)."""
    model, loss_fn = phase._plain_parts(learner)
    loss_metric = metrics.batch_metrics[0] if metrics.batch_metrics else None
    check_finite = learner.guard.check_every_step  # CPU: the loss is read back per step, for free
    if loss_metric is None:
        add_loss = None
    else:
        add_loss = loss_metric._add_float if check_finite else loss_metric._add
    opt_step, zero_grad = learner.optimizer.step, learner.optimizer.zero_grad
    ctx, after_step = metrics.ctx, learner.after_step
    move, device, non_blocking = learner.move_batches, learner.device, learner.non_blocking
    isfinite, Tensor = math.isfinite, torch.Tensor
    tokens = phase.count_tokens
    sample = StepSampler.of(learner.bus, phase.name)
    judge_loss, log_every = learner.guard.judge_loss, learner.log_every_n_steps
    judge_logged = learner.guard.judge_logged_loss
    grads_every = learner.guard.judge_grads_every
    norm_of = GradNorm(learner.raw_model.parameters()) if grads_every else None  # bound once, as model is
    passed_over = {tuple(b) for b in state.skip_batches} or None  # a rollback's batches
    epoch = state.epoch
    i = start_batch
    loss = output = target = None
    n = 0
    try:
        for batch in loader.epoch_iter(state.epoch, start_batch):
            if passed_over is not None and (epoch, i) in passed_over:
                i += 1
                state.batch = i
                continue
            if move:
                batch = move_to(batch, device, non_blocking)
            try:
                if (type(batch) is tuple or type(batch) is list) and len(batch) == 2:
                    inputs, target = batch
                    output = model(inputs)
                    loss = loss_fn(output, target)
                    n = (target.numel() if tokens else target.shape[0]) if isinstance(target, Tensor) and \
                        target.dim() else batch_size_of(batch)
                else:  # a mapping (model(**batch)), or the default step's error for other shapes
                    out = phase.step(learner, batch)
                    loss, output, target = out.loss, out.output, out.target
                    n = phase.items_of(out, batch)
                loss.backward()
                if check_finite:  # the loss on the host anyway (CPU): judged every step, added as a float
                    v = loss.item()
                    bad = judge_loss(v, state, i)
                else:  # judged on the steps that log only; added as a tensor (no sync)
                    v = loss
                    bad = judge_logged and (state.step + 1) % log_every == 0 and judge_loss(loss.item(), state, i)
                if bad:  # a [watch] rule: this update is not applied
                    learner.guard.skip_update()
                    i += 1
                    state.batch = i
                    continue
                if add_loss is not None:
                    add_loss(v, n, n)
                ctx.window_items += n
            except CancelStep:
                pass
            i += 1
            state.batch = i
            if grads_every and (state.step + 1) % grads_every == 0 and \
                    learner.guard.judge_grads(norm_of, state, [i - 1]):
                learner.guard.skip_update()
                continue
            opt_step()
            zero_grad(set_to_none=True)
            step = state.step = state.step + 1
            ctx.window_steps += 1
            if sample is not None:
                sample(state.epoch, step, i, n)
            if after_step(metrics, phase.split, state, i, total, (loss, output, target, n)):
                break
    except CancelEpoch:
        pass
    state.last = StepOutput(loss, output, target, n) if loss is not None else state.last
    if sample is not None:
        sample.flush()
    return phase.finish(learner, state, metrics)


def valid_epoch(phase: "ValidPhase", learner: "Learner", loader, state: "TrainState", start_batch: int = 0) -> dict:
    metrics = learner.metric_sets[phase.split]
    bus, interrupter = learner.bus, learner.interrupter
    wants_steps, tick = bus.wants_steps, bus.tick
    sample = StepSampler.of(bus, phase.name)
    total = loader.batches_per_epoch()
    phase.begin(learner, state, metrics, total, fresh=True)
    batches = loader.epoch_iter(state.epoch, 0)
    if metrics.times_data:
        batches = timed(batches, metrics.ctx)
    try:
        with torch.no_grad():
            for i, batch in enumerate(batches):
                if wants_steps:
                    bus.emit_step(StepStarted(phase=phase.name, epoch=state.epoch, step=state.step, batch=i))
                if learner.move_batches:
                    batch = move_to(batch, learner.device, learner.non_blocking)
                try:
                    with learner.autocast():
                        out = phase.step(learner, batch)
                    if type(out) is not StepOutput:
                        out = StepOutput.of(out)
                    n = phase.items_of(out, batch)
                    metrics.update(out, n)
                    metrics.step_done()
                    state.last = out
                except CancelStep:
                    n = 0
                if wants_steps:
                    bus.emit_step(StepCompleted(phase=phase.name, epoch=state.epoch, step=state.step,
                                                batch=i + 1, items=n))
                elif sample is not None:
                    sample(state.epoch, state.step, i + 1, n)
                tick()  # validation emits nothing per batch: the run's chores come by here
                if interrupter.pending:
                    learner.at_boundary(state)
    except CancelEpoch:
        pass
    finally:
        learner.model.train()
    if sample is not None:
        sample.flush()
    return phase.finish(learner, state, metrics)
