"""Phases: the training and validation loops over one epoch's batches, as first-class objects.

A phase has a `name`, the metric `split` it reports under, `training` (whether schedulers, clipping and
accumulation apply) and `step(learner, batch) -> StepOutput`. A user's own phase overrides `step`:
a `TrainPhase` subclass changes the forward and loss (tuitrain still does the backward and the optimizer
step); a `CustomTrainPhase` subclass does its own backward and optimizer steps with `learner.backward`
and `learner.step_optimizer(name)` (GANs, several models); a `ValidPhase` subclass computes its metrics.
A step may return a dict: "loss" plus named values that metrics of those names log.
Cancelling is done with the typed exceptions below. Must not import textual.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from .callbacks import STEP_SAMPLE_INTERVAL
from .events import MetricsLogged, PhaseCompleted, PhaseStarted, StepCompleted, StepStarted
from .metrics import Loss, StepOutput
from .state import CancelEpoch, CancelFitting, CancelStep, NonFiniteLoss  # noqa: F401 (their home before)

if TYPE_CHECKING:
    from .learner import Learner
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


def batch_size_of(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, (list, tuple)) and batch:
        return batch_size_of(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_size_of(next(iter(batch.values())))
    return 1


def tokens_of(batch: Any) -> int:
    """A batch's tokens, for throughput in tokens: the elements of its labels, targets or input ids."""
    if isinstance(batch, Mapping):
        for key in ("labels", "input_ids"):
            if isinstance(batch.get(key), torch.Tensor):
                return batch[key].numel()
    if isinstance(batch, (list, tuple)) and len(batch) == 2 and isinstance(batch[1], torch.Tensor):
        return batch[1].numel()
    if isinstance(batch, torch.Tensor):
        return batch.numel()
    return batch_size_of(batch)


def _field(obj: Any, name: str) -> Any:
    """`obj.name` or `obj[name]` (a dataclass, a dict, a Hugging Face ModelOutput), None when absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def mapping_step(model: Any, batch: Mapping, loss_fn: Any = None) -> StepOutput:
    """The default step for a mapping batch: `model(**batch)`; the loss is the output's `loss`
    (attribute or key), else `loss_fn(logits, labels)`; accuracy-like metrics read `logits` and
    `labels`."""
    out = model(**batch)
    logits = _field(out, "logits")
    if logits is None and isinstance(out, torch.Tensor):
        logits = out
    labels = batch.get("labels", batch.get("label"))
    loss = _field(out, "loss") if not isinstance(out, torch.Tensor) else None
    if loss is None:
        if loss_fn is None or logits is None or labels is None:
            raise ValueError(f"model(**batch) returned {type(out).__name__} without a 'loss': return one (a "
                             "Hugging Face model does when the batch has 'labels'), or return 'logits' with "
                             "'labels' in the batch for the [loss] target")
        loss = loss_fn(logits, labels)
    return StepOutput(loss=loss, output=logits, target=labels)


def move_to(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        moved = [move_to(b, device, non_blocking) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, dict):
        return {k: move_to(v, device, non_blocking) for k, v in batch.items()}
    return batch


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


class Phase:
    name = "phase"
    split = "train"
    training = True

    def step(self, learner: "Learner", batch: Any) -> StepOutput:
        """One batch: the model's own train_step/valid_step, or (inputs, targets) with the loss target."""
        model = learner.model
        own = self._own_step(learner)
        if own is not None:
            return StepOutput.of(own(batch))
        if isinstance(batch, Mapping):  # Hugging Face style: model(**batch) returns its own loss
            return mapping_step(model, batch, learner.loss_fn)
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:
            raise TypeError("the default step expects batches of (inputs, targets) or mappings of model "
                            "arguments; give the model train_step/valid_step methods for other batch shapes")
        inputs, target = batch
        output = model(inputs)
        if learner.loss_fn is None:
            raise ValueError("no loss function: set [loss] target or give the model a train_step")
        return StepOutput(loss=learner.loss_fn(output, target), output=output, target=target)

    def _plain_parts(self, learner: "Learner"):
        """(model, loss function) when batches take the default (inputs, targets) step; else None."""
        if type(self).step is not Phase.step or self._own_step(learner) is not None or learner.loss_fn is None:
            return None
        return learner.model, learner.loss_fn

    def bound_step(self, learner: "Learner"):
        """`step` bound to `learner` for one epoch's loop: `fn(batch) -> StepOutput`. For the default
        (inputs, targets) step with a loss function, the model and loss are looked up once, not per batch."""
        parts = self._plain_parts(learner)
        if parts is None:
            return functools.partial(self.step, learner)
        (model, loss_fn), step = parts, self.step

        def plain(batch):
            if (type(batch) is tuple or type(batch) is list) and len(batch) == 2:
                inputs, target = batch
                output = model(inputs)
                return StepOutput(loss_fn(output, target), output, target)
            return step(learner, batch)  # other shapes: the default step says what is wrong

        return plain

    def _own_step(self, learner: "Learner"):
        # looked up once per model: nn.Module.__getattr__ raising for a missing name costs microseconds
        raw = learner.raw_model
        cached = self.__dict__.get("_own")
        if cached is None or cached[0] is not raw:
            cached = (raw, getattr(raw, "train_step" if self.training else "valid_step", None))
            self._own = cached
        return cached[1]

    def items_of(self, out: StepOutput, batch: Any) -> int:
        if out.items:
            return out.items
        if isinstance(out.target, torch.Tensor) and out.target.dim():
            return out.target.numel() if self.count_tokens else out.target.shape[0]
        if self.count_tokens:
            return tokens_of(batch)
        return batch_size_of(batch)

    #: throughput counts tokens (a target's elements) instead of samples (set by the Learner)
    count_tokens = False

    def run(self, learner: "Learner", loader, state: "TrainState", start_batch: int = 0) -> dict:
        raise NotImplementedError

    def begin(self, learner: "Learner", state: "TrainState", metrics, batches: int, fresh: bool) -> None:
        """Reset the split's metrics (unless resuming mid-phase), say PhaseStarted, set the mode."""
        if fresh:
            metrics.start_phase()
        learner.bus.emit(PhaseStarted(phase=self.name, split=self.split, epoch=state.epoch, step=state.step,
                                      batches=batches))
        state.phase = self.name
        learner.phase = self
        learner.model.train(self.training)

    def finish(self, learner: "Learner", state: "TrainState", metrics) -> dict:
        """The phase's aggregates: one epoch-scope MetricsLogged, then PhaseCompleted."""
        result = metrics.read_phase()
        if result:
            learner.bus.emit(MetricsLogged(split=self.split, epoch=state.epoch, step=state.step, metrics=result,
                                           scope="epoch"))
        learner.bus.emit(PhaseCompleted(phase=self.name, split=self.split, epoch=state.epoch, step=state.step,
                                        metrics=result, duration=metrics.ctx.phase_time,
                                        items=metrics.ctx.phase_items))
        return result


class TrainPhase(Phase):
    name = "train"
    split = "train"
    training = True
    #: the step does its own backward and optimizer steps; one batch is one training step
    manual_optimization = False

    def run(self, learner: "Learner", loader, state: "TrainState", start_batch: int = 0) -> dict:
        metrics = learner.metric_sets[self.split]
        bus = learner.bus
        wants_steps = bus.wants_steps
        total = loader.batches_per_epoch()
        manual = self.manual_optimization
        accum = 1 if manual else learner.grad_accumulation
        check_finite = learner.check_every_step
        self.begin(learner, state, metrics, total, fresh=start_batch == 0)
        autocast, backward, optimizer_step = learner.loop_parts()
        if (accum == 1 and not manual and autocast is None and optimizer_step is None and not wants_steps
                and self._plain_parts(learner) is not None and not metrics.times_data
                and all(type(m) is Loss for m in metrics.batch_metrics)):
            return self._run_plain(learner, loader, state, start_batch, metrics, total)
        i = start_batch
        in_group = 0
        group_div = float(min(accum, total - i)) if total else float(accum)
        # locals: this loop runs per batch, and attribute lookups are most of its own cost
        step_fn, items_of, update, ctx = self.bound_step(learner), self.items_of, metrics.update, metrics.ctx
        if optimizer_step is None:  # the plain form, inlined below: step, then clear the gradients
            opt_step, zero_grad = learner.optimizer.step, learner.optimizer.zero_grad
        move, device, non_blocking = learner.move_batches, learner.device, learner.non_blocking
        after_step = learner.after_step  # the log, a due checkpoint, the step boundary, max_steps
        sample = StepSampler.of(bus, self.name)
        n = group_items = 0  # items of this batch, of this optimizer step's batches
        # the [watch] rules (health.py): the loss judged every step where it is on the host anyway, else
        # on the steps that log; the gradients on the steps that log (an optimizer_step judges its own)
        judge_loss, log_every = learner.judge_loss, learner.log_every_n_steps
        judge_logged = learner.judge_logged_loss
        grads_every = learner.judge_grads_every if optimizer_step is None and not manual else 0
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
                    bus.emit_step(StepStarted(phase=self.name, epoch=state.epoch, step=state.step + 1, batch=i))
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
                        skip_group = learner.judge_grads(learner.raw_model.parameters(), state,
                                                         list(range(i - in_group, i)))
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
                            learner.skip_update()
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
                        bus.emit_step(StepCompleted(phase=self.name, epoch=state.epoch, step=step, batch=i,
                                                    items=group_items))
                    elif sample is not None:
                        sample(state.epoch, step, i, group_items)
                    group_items = 0
                    if after_step(metrics, self.split, state, i, total):
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
        return self.finish(learner, state, metrics)

    def _run_plain(self, learner: "Learner", loader, state: "TrainState", start_batch: int, metrics,
                   total: int) -> dict:
        """`run` for the common case, step for step the same: the default (inputs, targets) step, a
        plain optimizer step per batch, the loss as the only per-batch metric and no callback that
        takes every step (sampled ones may). It makes no call that case does not need (no StepOutput
        and no metric dispatch per batch)."""
        model, loss_fn = self._plain_parts(learner)
        loss_metric = metrics.batch_metrics[0] if metrics.batch_metrics else None
        check_finite = learner.check_every_step  # CPU: the loss is read back per step, for free
        if loss_metric is None:
            add_loss = None
        else:
            add_loss = loss_metric._add_float if check_finite else loss_metric._add
        opt_step, zero_grad = learner.optimizer.step, learner.optimizer.zero_grad
        ctx, after_step = metrics.ctx, learner.after_step
        move, device, non_blocking = learner.move_batches, learner.device, learner.non_blocking
        isfinite, Tensor = math.isfinite, torch.Tensor
        tokens = self.count_tokens
        sample = StepSampler.of(learner.bus, self.name)
        judge_loss, log_every = learner.judge_loss, learner.log_every_n_steps
        judge_logged = learner.judge_logged_loss
        grads_every = learner.judge_grads_every
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
                        out = self.step(learner, batch)
                        loss, output, target = out.loss, out.output, out.target
                        n = self.items_of(out, batch)
                    loss.backward()
                    if check_finite:
                        v = loss.item()
                        if judge_loss(v, state, i):  # a [watch] rule: this update is not applied
                            learner.skip_update()
                            i += 1
                            state.batch = i
                            continue
                        if add_loss is not None:
                            add_loss(v, n, n)
                    else:
                        if judge_logged and (state.step + 1) % log_every == 0 and judge_loss(loss.item(), state, i):
                            learner.skip_update()
                            i += 1
                            state.batch = i
                            continue
                        if add_loss is not None:
                            add_loss(loss, n, n)
                    ctx.window_items += n
                except CancelStep:
                    pass
                i += 1
                state.batch = i
                if grads_every and (state.step + 1) % grads_every == 0 and \
                        learner.judge_grads(learner.raw_model.parameters(), state, [i - 1]):
                    learner.skip_update()
                    continue
                opt_step()
                zero_grad(set_to_none=True)
                step = state.step = state.step + 1
                ctx.window_steps += 1
                if sample is not None:
                    sample(state.epoch, step, i, n)
                if after_step(metrics, self.split, state, i, total, (loss, output, target, n)):
                    break
        except CancelEpoch:
            pass
        state.last = StepOutput(loss, output, target, n) if loss is not None else state.last
        if sample is not None:
            sample.flush()
        return self.finish(learner, state, metrics)


class CustomTrainPhase(TrainPhase):
    """A training phase whose `step` runs the optimization itself, for several models or optimizers::

        class GANPhase(CustomTrainPhase):
            def step(self, learner, batch):
                learner.zero_grad()
                d_loss = ...  # with learner.models["discriminator"], learner.models["generator"]
                learner.backward(d_loss)
                learner.step_optimizer("discriminator")  # clipping, scaler, zero_grad, its scheduler
                ...
                return {"loss": g_loss + d_loss, "g_loss": g_loss, "d_loss": d_loss}

    Each batch is one training step (counted, logged, checkpointed and resumable like any other);
    train.grad_accumulation does not apply. Return a loss tensor, a dict or a StepOutput.
    """

    manual_optimization = True

    def step(self, learner: "Learner", batch: Any) -> StepOutput:
        raise NotImplementedError("a CustomTrainPhase defines step(learner, batch)")


class ValidPhase(Phase):
    name = "valid"
    split = "valid"
    training = False

    def run(self, learner: "Learner", loader, state: "TrainState", start_batch: int = 0) -> dict:
        metrics = learner.metric_sets[self.split]
        bus, interrupter = learner.bus, learner.interrupter
        wants_steps, tick = bus.wants_steps, bus.tick
        sample = StepSampler.of(bus, self.name)
        total = loader.batches_per_epoch()
        self.begin(learner, state, metrics, total, fresh=True)
        batches = loader.epoch_iter(state.epoch, 0)
        if metrics.times_data:
            batches = timed(batches, metrics.ctx)
        try:
            with torch.no_grad():
                for i, batch in enumerate(batches):
                    if wants_steps:
                        bus.emit_step(StepStarted(phase=self.name, epoch=state.epoch, step=state.step, batch=i))
                    if learner.move_batches:
                        batch = move_to(batch, learner.device, learner.non_blocking)
                    try:
                        with learner.autocast():
                            out = self.step(learner, batch)
                        if type(out) is not StepOutput:
                            out = StepOutput.of(out)
                        n = self.items_of(out, batch)
                        metrics.update(out, n)
                        metrics.step_done()
                        state.last = out
                    except CancelStep:
                        n = 0
                    if wants_steps:
                        bus.emit_step(StepCompleted(phase=self.name, epoch=state.epoch, step=state.step,
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
        return self.finish(learner, state, metrics)
