"""The training loop, in one file: the epochs (`Loop.run`), one epoch of training (`Loop.train_epoch`,
and `Loop.plain_epoch`, the same loop for the common case without the calls it does not need), one of
validation (`Loop.valid_epoch`, also run within an epoch every N steps), and what happens after every
optimizer step (`Loop.after_step`) and at a step boundary (`Loop.at_boundary`).

A phase (phases.py) is the user's step and nothing more: one batch in, a StepOutput out. Per training
batch: the step under autocast, the backward (divided over an accumulation group), the [watch] rules
(`Judge`: the one copy of which batches a rollback passes over, the loss judged, the gradients judged)
and the optimizer step, or the update skipped; then `after_step`: the log every N steps, a due
checkpoint, the step boundary (control requests, pause, a due validation or checkpoint, through the
run's `Lifecycle`) and max_steps. The loop reads its learner's parts (a `CoreLearner`, learner.py,
which imports this module: never the reverse). Must not import textual.
"""

from __future__ import annotations

import contextlib
import functools
import time

import torch

from .batches import batch_size_of, move_to
from .callbacks import StepSampler
from .data import rng_state, set_rng_state
from .events import (EpochCompleted, EpochStarted, MetricsLogged, OutputPrinted, PhaseCompleted, PhaseStarted,
                     StepCompleted, StepStarted)
from .learner_health import TotalNorm
from .metrics import Loss, StepOutput
from .phases import pair_step
from .state import CancelEpoch, CancelFitting, CancelStep, RollBack


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


def bound_step(phase, learner):
    """`phase.step` bound to `learner` for one epoch's loop: `fn(batch) -> StepOutput`. For the default
    (inputs, targets) step with a loss function, the model and loss are looked up once, not per batch."""
    parts = phase.plain_parts(learner)
    if parts is None:
        return functools.partial(phase.step, learner)
    (model, loss_fn), step = parts, phase.step

    def plain(batch):
        out = pair_step(model, loss_fn, batch)
        if out is None:  # other shapes: the default step says what is wrong
            return step(learner, batch)
        return StepOutput(*out)

    return plain


class Judge:
    """The [watch] rules in a training loop, one copy for every loop: the batches a rollback passes over,
    the loss judged (every step where it is on the host anyway, the CPU; else on the steps that log),
    the gradients' norm judged on the steps that log (`grads`: this loop steps the optimizer itself in
    the plain form; else the optimizer step judges its own), an update not applied (`skip`)."""

    __slots__ = ("guard", "every_step", "logged", "log_every", "grads_every", "norm_of", "passed_over", "epoch",
                 "skip")

    def __init__(self, learner, state, grads: bool) -> None:
        guard = self.guard = learner.guard
        self.every_step, self.logged = guard.check_every_step, guard.judge_logged_loss
        self.log_every = learner.log_every_n_steps
        self.grads_every = guard.judge_grads_every if grads else 0
        # bound once, as the step is
        self.norm_of = TotalNorm(learner.raw_model.parameters()) if self.grads_every else None
        self.passed_over = {tuple(b) for b in state.skip_batches} or None
        self.epoch = state.epoch
        self.skip = guard.skip_update

    def passes_over(self, i: int) -> bool:
        """Batch `i` is one a rollback passes over."""
        return self.passed_over is not None and (self.epoch, i) in self.passed_over

    def loss(self, loss, state, i: int):
        """(the loss as added to the metrics, bad): a float where it was read back to be judged, else the
        tensor itself (no sync); bad: its update is not to be applied."""
        if self.every_step:
            v = loss.item()
            return v, self.guard.judge_loss(v, state, i)
        if self.logged and (state.step + 1) % self.log_every == 0:
            v = loss.item()
            return v, self.guard.judge_loss(v, state, i)
        return loss, False

    def grads(self, state, batches: list[int]) -> bool:
        """The gradients of the step about to be taken judged bad (on the steps that log)."""
        return bool(self.grads_every and (state.step + 1) % self.grads_every == 0
                    and self.guard.judge_grads(self.norm_of, state, batches))


class Loop:
    """One learner's loop over epochs: what `CoreLearner.fit` runs between RunStarted and the final
    checkpoint. It holds what the loop keeps between steps (a validation or checkpoint due at the next
    boundary, the epoch's batch count); the run's state is `learner.state`."""

    def __init__(self, learner) -> None:
        self.learner = learner
        self.valid_due = False  # validate_every_n_steps: a validation waits at the next boundary
        self.validating = False
        self.checkpoint_due = False  # checkpoint.every_n_steps: a checkpoint waits at the next boundary
        self.epoch_batches = 0
        self.valid_loader = None

    def count_step(self, *_) -> None:
        """The optimizer stepped (its post-hook): a validation is due every N steps."""
        L = self.learner
        s = L.state
        if s.stage == "train" and not self.validating and (s.step + 1) % L.validate_every_n_steps == 0:
            self.valid_due = True
            L.interrupter.visit()  # the loop comes by its step boundary, where it runs

    # --- the epochs ----------------------------------------------------------------------------

    def run(self, train, valid) -> str:
        """The epochs, gone back to an earlier checkpoint each time a health rule rolls back; why they
        ended ("epochs", "max_steps", "early_stopping"); a stop raises CancelFitting."""
        L = self.learner
        self.valid_loader = valid
        while True:
            try:
                return self.epochs(train, valid)
            except RollBack as rb:
                L.guard.roll_back(rb, train, L.load_state_dict)

    def epochs(self, train, valid) -> str:
        L = self.learner
        s = L.state
        es = L.early_stopping
        self.epoch_batches = train.batches_per_epoch()
        while s.epoch <= L.epochs:
            if L.max_steps and s.step >= L.max_steps:
                return "max_steps"
            e = s.epoch
            t0 = time.monotonic()
            if s.stage == "train":
                # resumed mid-epoch: the epoch began ceil(batches done / accumulation) steps ago
                began = s.step - (-(-s.batch // L.grad_accumulation))
                L.bus.emit(EpochStarted(epoch=e, epochs=L.epochs, step=max(began, 0)))
                if s.batch == 0:
                    s.epoch_metrics = {}
                res = self.train_epoch(train, s, start_batch=s.batch)
                self.record(L.train_phase.split, res)
                s.stage = "valid"
                s.valid_rng = rng_state()
            if s.stage == "valid":
                by_steps = L.validate_every_n_steps > 0
                at_end = e >= L.epochs or (L.max_steps and s.step >= L.max_steps)
                if valid is not None and s.step != s.valid_at and (
                        (not by_steps and e % L.validate_every == 0) or (by_steps and at_end)):
                    self.validate(s)
                s.stage = "done"
                s.valid_rng = None
            for name, sched in L.schedulers.items():
                if L.scheduler_intervals[name] == "epoch":
                    sched.step()
            stop_early = False
            # by steps, early stopping counts each validation once: where it ran (mid-epoch, or here)
            if es is not None and (not L.validate_every_n_steps or s.valid_at == s.step):
                stop_early = es.update(s.epoch_metrics, e)
            L.bus.emit(EpochCompleted(epoch=e, epochs=L.epochs, step=s.step, metrics=dict(s.epoch_metrics),
                                      duration=time.monotonic() - t0))
            ckpt = L.checkpointer
            every = ckpt.every_n_epochs if ckpt is not None else 0
            last = e >= L.epochs or stop_early or s.stop_reason == "max_steps"  # the final save follows
            if not last and ((every and e % every == 0) or self.checkpoint_due):
                L.save_checkpoint("epoch" if every and e % every == 0 else "step")
            self.checkpoint_due = False
            if stop_early:
                L.bus.emit(OutputPrinted(text=es.message, stream="tuitrain"))
                return "early_stopping"
            if s.stop_reason == "max_steps":
                return "max_steps"
            self.at_boundary(s)
            s.epoch, s.batch, s.stage = e + 1, 0, "train"
        s.epoch = min(s.epoch, max(L.epochs, 1))
        s.stage = "done"
        return "epochs"

    def record(self, split: str, values: dict) -> None:
        s = self.learner.state
        for k, v in values.items():
            key = f"{split}/{k}"
            s.epoch_metrics[key] = v
            s.history.setdefault(key, []).append([s.epoch, v])

    # --- a phase's start and end ---------------------------------------------------------------

    def begin(self, phase, state, metrics, batches: int, fresh: bool) -> None:
        """Reset the split's metrics (unless resuming mid-phase), say PhaseStarted, set the mode."""
        L = self.learner
        if fresh:
            metrics.start_phase()
        L.bus.emit(PhaseStarted(phase=phase.name, split=phase.split, epoch=state.epoch, step=state.step,
                                batches=batches))
        state.phase = phase.name
        L.phase = phase
        L.model.train(phase.training)

    def finish(self, phase, state, metrics) -> dict:
        """The phase's aggregates: one epoch-scope MetricsLogged, then PhaseCompleted."""
        bus = self.learner.bus
        result = metrics.read_phase()
        if result:
            bus.emit(MetricsLogged(split=phase.split, epoch=state.epoch, step=state.step, metrics=result,
                                   scope="epoch"))
        bus.emit(PhaseCompleted(phase=phase.name, split=phase.split, epoch=state.epoch, step=state.step,
                                metrics=result, duration=metrics.ctx.phase_time, items=metrics.ctx.phase_items))
        return result

    # --- one epoch of training -----------------------------------------------------------------

    def train_epoch(self, loader, state, start_batch: int = 0) -> dict:
        L = self.learner
        phase = L.train_phase
        metrics = L.metric_sets[phase.split]
        bus = L.bus
        wants_steps = bus.wants_steps
        total = loader.batches_per_epoch()
        manual = phase.manual_optimization
        accum = 1 if manual else L.grad_accumulation
        self.begin(phase, state, metrics, total, fresh=start_batch == 0)
        autocast, backward, optimizer_step = L.loop_parts()
        if (accum == 1 and not manual and autocast is None and optimizer_step is None and not wants_steps
                and phase.plain_parts(L) is not None and not metrics.times_data
                and all(type(m) is Loss for m in metrics.batch_metrics)):
            return self.plain_epoch(loader, state, start_batch, metrics, total)
        i = start_batch
        in_group = 0
        group_div = float(min(accum, total - i)) if total else float(accum)
        # locals: this loop runs per batch, and attribute lookups are most of its own cost
        step_fn, items_of, update, ctx = bound_step(phase, L), phase.items_of, metrics.update, metrics.ctx
        if optimizer_step is None:  # the plain form, inlined below: step, then clear the gradients
            opt_step, zero_grad = L.optimizer.step, L.optimizer.zero_grad
        move, device, non_blocking = L.move_batches, L.device, L.non_blocking
        after_step = self.after_step  # the log, a due checkpoint, the step boundary, max_steps
        sample = StepSampler.of(bus, phase.name)
        n = group_items = 0  # items of this batch, of this optimizer step's batches
        judge = Judge(L, state, grads=optimizer_step is None and not manual)
        skip_group = False  # a batch of this optimizer step's group is judged bad: its update is not applied
        batches = loader.epoch_iter(state.epoch, start_batch)
        if metrics.times_data:
            batches = timed(batches, ctx)
        try:
            for batch in batches:
                if judge.passes_over(i):
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
                        L.end_manual_step()
                    else:
                        backward(loss / group_div if group_div != 1.0 else loss)
                    if loss is not None:
                        v, bad = judge.loss(loss, state, i)
                        if v is not loss:
                            out.value = v
                        if bad:
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
                    if not skip_group and judge.grads(state, list(range(i - in_group, i))):
                        skip_group = True
                    elif skip_group or manual:
                        pass
                    elif optimizer_step is None:
                        opt_step()
                        zero_grad(set_to_none=True)
                    elif optimizer_step() is False:  # a health rule judged the gradients: not applied
                        skip_group = True
                    if skip_group:  # not applied: the step counter stays, as if the batches had not come
                        if not manual:
                            judge.skip()
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
                L.optimizer_step()
            state.step += 1
            metrics.step_done()
        if sample is not None:
            sample.flush()
        return self.finish(phase, state, metrics)

    def plain_epoch(self, loader, state, start_batch: int, metrics, total: int) -> dict:
        """`train_epoch` for the common case, step for step the same: the default (inputs, targets)
        step, a plain optimizer step per batch, the loss as the only per-batch metric and no callback
        that takes every step (sampled ones may). It makes no call that case does not need (no
        StepOutput and no metric dispatch per batch)."""
        L = self.learner
        phase = L.train_phase
        model, loss_fn = phase.plain_parts(L)
        loss_metric = metrics.batch_metrics[0] if metrics.batch_metrics else None
        judge = Judge(L, state, grads=True)
        if loss_metric is None:
            add_loss = None
        else:  # CPU: the loss is read back per step (judged), added as a float; else as a tensor
            add_loss = loss_metric._add_float if judge.every_step else loss_metric._add
        opt_step, zero_grad = L.optimizer.step, L.optimizer.zero_grad
        ctx, after_step = metrics.ctx, self.after_step
        move, device, non_blocking = L.move_batches, L.device, L.non_blocking
        Tensor = torch.Tensor
        tokens = phase.count_tokens
        sample = StepSampler.of(L.bus, phase.name)
        i = start_batch
        loss = output = target = None
        n = 0
        try:
            for batch in loader.epoch_iter(state.epoch, start_batch):
                if judge.passes_over(i):
                    i += 1
                    state.batch = i
                    continue
                if move:
                    batch = move_to(batch, device, non_blocking)
                try:
                    out = pair_step(model, loss_fn, batch)
                    if out is not None:
                        loss, output, target = out
                        n = (target.numel() if tokens else target.shape[0]) if isinstance(target, Tensor) and \
                            target.dim() else batch_size_of(batch)
                    else:  # a mapping (model(**batch)), or the default step's error for other shapes
                        out = phase.step(L, batch)
                        loss, output, target = out.loss, out.output, out.target
                        n = phase.items_of(out, batch)
                    loss.backward()
                    v, bad = judge.loss(loss, state, i)
                    if not judge.every_step:  # added as the tensor, read back or not (no sync)
                        v = loss
                    if bad:  # a [watch] rule: this update is not applied
                        judge.skip()
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
                if judge.grads(state, [i - 1]):
                    judge.skip()
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
        return self.finish(phase, state, metrics)

    # --- validation ----------------------------------------------------------------------------

    def valid_epoch(self, loader, state) -> dict:
        L = self.learner
        phase = L.valid_phase
        metrics = L.metric_sets[phase.split]
        bus, interrupter = L.bus, L.interrupter
        wants_steps, tick = bus.wants_steps, bus.tick
        sample = StepSampler.of(bus, phase.name)
        total = loader.batches_per_epoch()
        self.begin(phase, state, metrics, total, fresh=True)
        batches = loader.epoch_iter(state.epoch, 0)
        if metrics.times_data:
            batches = timed(batches, metrics.ctx)
        try:
            with torch.no_grad():
                for i, batch in enumerate(batches):
                    if wants_steps:
                        bus.emit_step(StepStarted(phase=phase.name, epoch=state.epoch, step=state.step, batch=i))
                    if L.move_batches:
                        batch = move_to(batch, L.device, L.non_blocking)
                    try:
                        with L.autocast():
                            out = phase.step(L, batch)
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
                        self.at_boundary(state)
        except CancelEpoch:
            pass
        finally:
            L.model.train()
        if sample is not None:
            sample.flush()
        return self.finish(phase, state, metrics)

    def validate(self, state) -> None:
        """One validation now (the averaged weights with EMA), recorded as the epoch's valid metrics."""
        L = self.learner
        with L.ema.swapped_in() if L.ema is not None else contextlib.nullcontext():
            res = self.valid_epoch(self.valid_loader, state)
        self.record(L.valid_phase.split, res)
        state.valid_at = state.step

    def validate_mid_epoch(self, state) -> None:
        """`validate_every_n_steps`: validate inside the training phase, which then goes on as if
        nothing happened (its RNG, its phase); early stopping and "best" checkpoints follow."""
        L = self.learner
        if self.valid_loader is None:
            return
        rng, phase, name = rng_state(), L.phase, state.phase
        self.validating = True
        try:
            self.validate(state)
        finally:
            self.validating = False
            set_rng_state(rng)
            L.phase, state.phase = phase, name
            L.model.train(True)
        if phase is not None:  # the progress shown is training's again
            L.bus.emit(PhaseStarted(phase=phase.name, split=phase.split, epoch=state.epoch, step=state.step,
                                    batches=self.epoch_batches))
        es = L.early_stopping
        if es is not None and es.update(state.epoch_metrics, state.epoch):
            L.bus.emit(OutputPrinted(text=es.message, stream="tuitrain"))
            raise CancelFitting("early_stopping")

    # --- after a step, at a boundary -----------------------------------------------------------

    def log_step(self, metrics, split: str, state, batch: int, total: int) -> None:
        L = self.learner
        if not L.strategy.solo_boundaries:  # a finished write's events go out here, not at a boundary
            L.ckpt_io.flush_events()
        values = metrics.read_window()
        if split == "train":
            L.guard.judge_logged(values, state)  # data_wait; a non-finite mean the steps did not judge
        state.last_logged = values
        L.bus.emit(MetricsLogged(split=split, epoch=state.epoch, step=state.step, metrics=values,
                                 scope="step", batch=batch, batches=total))

    def after_step(self, metrics, split: str, state, batch: int, total: int, last: tuple | None = None) -> bool:
        """What happens after every optimizer step, in every training loop (the plain one too): the
        metrics logged every `log_every_n_steps`, a step checkpoint marked due, the step boundary
        visited when anything waits there (a control request, a due checkpoint or validation, a finished
        write's events), and `max_steps`. `last`: (loss, output, target, items) when the loop has not
        kept a StepOutput. True: training ends here (max_steps)."""
        L = self.learner
        step = state.step
        ckpt = L.ckpt_io.checkpointer
        if step % L.log_every_n_steps == 0:
            if last is not None:
                state.last = StepOutput(*last)
            self.log_step(metrics, split, state, batch, total)
        if ckpt is not None:
            every = ckpt.every_n_steps
            if every and step % every == 0:
                self.checkpoint_due = True
            # ranks enter boundaries together: never for one rank's finished write (see log_step)
            events = L.strategy.solo_boundaries and ckpt.has_events
        else:
            events = False
        if L.interrupter.pending or self.checkpoint_due or events:
            if last is not None:
                state.last = StepOutput(*last)
            self.at_boundary(state)
        media = L.media_chores  # [log] samples and histograms
        if media is not None and step >= media.next_step:
            media.at_step(step)
        if L.max_steps and step >= L.max_steps:
            state.stop_reason = "max_steps"
            return True
        return False

    def at_boundary(self, state) -> None:
        """Apply control requests (the run's `Lifecycle`: said, a checkpoint asked for, a pause), a due
        validation or checkpoint; raises CancelFitting on a stop."""
        L = self.learner
        it = L.interrupter
        it.sync()  # ranks: every one holds the same flags from here (one process: nothing)
        if it.failure:
            L.write_failed()
        if self.valid_due and not self.validating:
            self.valid_due = False
            self.validate_mid_epoch(state)
        L.ckpt_io.flush_events()
        life = L.lifecycle
        life.report()
        if self.checkpoint_due and not self.validating and not (
                state.stage == "train" and state.batch == self.epoch_batches):
            self.checkpoint_due = False  # at an epoch's last step it waits for the epoch's end: one file
            L.save_checkpoint("step")
        life.boundary(state.epoch, state.step)
        it.settle()
        if it.failure:
            L.write_failed()
        if it.stop_requested:
            raise CancelFitting(it.stop_reason)
