"""The training loop, in one file: the epochs (`Loop.run`), one epoch of training (`Loop.train_epoch`,
and `Loop.plain_epoch`, the same loop for the common case without the calls it does not need), one of
validation (`Loop.valid_epoch`, also run within an epoch every N steps), and what happens after every
optimizer step (`Loop.after_step`) and at a step boundary (`Loop.at_boundary`).

A phase (phases.py) is the user's step and nothing more: one batch in, a StepOutput out. Per training
batch: the step under autocast, the backward (divided over an accumulation group), the [watch] rules
(`Judge`, loop_parts.py: the one copy of which batches a rollback passes over, the loss judged, the
gradients judged) and the optimizer step, or the update skipped; then `after_step`: the log every N
steps, a due checkpoint, the step boundary (control requests, pause, a due validation or checkpoint,
through the run's `Lifecycle`) and max_steps. When to save is saving.py's to decide. The loop reads one
fit's parts (`LoopParts`, loop_parts.py), never the Learner's attributes. Must not import textual.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .batches import batch_size_of, move_to
from .callbacks import StepSampler
from .data import rng_state, set_rng_state
from .events import (
    EpochCompleted,
    EpochStarted,
    MetricsLogged,
    OutputPrinted,
    PhaseCompleted,
    PhaseStarted,
    StepCompleted,
    StepStarted,
)
from .loop_parts import Judge, LoopParts, timed
from .metrics import Loss, StepOutput
from .phases import pair_step
from .saving import Boundary, EpochEnd, Save, StepDone
from .state import CancelEpoch, CancelFitting, CancelStep, RollBack, TrainState

if TYPE_CHECKING:
    from .data import ResumableLoader
    from .metrics import MetricSet
    from .phases import Phase, PhaseLearner

#: what `after_step` is given by a loop that keeps no StepOutput: (loss, output, target, items)
Last = tuple[Any, Any, Any, int]


def bound_step(phase: Phase, learner: PhaseLearner) -> Callable[[Any], StepOutput]:
    """`phase.step` bound to `learner` for one epoch's loop: `fn(batch) -> StepOutput`. For the default
    (inputs, targets) step with a loss function, the model and loss are looked up once, not per batch."""
    parts = phase.plain_parts(learner)
    if parts is None:
        return functools.partial(phase.step, learner)
    (model, loss_fn), step = parts, phase.step

    def plain(batch: Any) -> StepOutput:
        out = pair_step(model, loss_fn, batch)
        if out is None:  # other shapes: the default step says what is wrong
            return step(learner, batch)
        return StepOutput(*out)

    return plain


class Loop:
    """One learner's loop over epochs: what `CoreLearner.fit` runs between RunStarted and the final
    checkpoint, over one fit's `LoopParts`. It holds what the loop keeps between steps (a validation or
    checkpoint due at the next boundary, the epoch's batch count, the phase running); the run's state
    is `parts.state`."""

    #: the common case runs `plain_epoch` (False: always `train_epoch`; the test of both bodies sets it)
    plain_allowed = True

    def __init__(self) -> None:
        self.parts: LoopParts = None  # type: ignore[assignment]  # this fit's, from `run` on
        self.phase: Phase | None = None  # the phase running now (set as it begins)
        self.valid_due = False  # validate_every_n_steps: a validation waits at the next boundary
        self.validating = False
        self.said_no_valid = False  # an empty validation said (once a fit)
        self.checkpoint_due: Save | None = None  # a step checkpoint waits at the next boundary
        self.step_saves = False  # step checkpoints are saved: each step asks the policy
        self.epoch_batches = 0
        self.valid_loader: ResumableLoader | None = None

    def count_step(self, *_: object) -> None:
        """The optimizer stepped (its post-hook): a validation is due every N steps."""
        p = self.parts
        if p is None:  # a step outside fit
            return
        s = p.state
        if s.stage == "train" and not self.validating and (s.step + 1) % p.validate_every_n_steps == 0:
            self.valid_due = True
            p.interrupter.visit()  # the loop comes by its step boundary, where it runs

    # --- the epochs ----------------------------------------------------------------------------

    def run(self, parts: LoopParts, train: ResumableLoader, valid: ResumableLoader | None) -> str:
        """The epochs, gone back to an earlier checkpoint each time a health rule rolls back; why they
        ended ("epochs", "max_steps", "early_stopping"); a stop raises CancelFitting."""
        self.parts = p = parts
        self.step_saves = bool(p.saving.every_n_steps) and p.ckpt_io.checkpointer is not None
        self.valid_loader = valid
        while True:
            try:
                return self.epochs(train, valid)
            except RollBack as rb:
                p.guard.roll_back(rb, train, p.load_state_dict)

    def epochs(self, train: ResumableLoader, valid: ResumableLoader | None) -> str:
        p = self.parts
        s = p.state
        es = p.early_stopping
        self.epoch_batches = train.batches_per_epoch()
        while s.epoch <= p.epochs:
            if p.max_steps and s.step >= p.max_steps:
                return "max_steps"
            e = s.epoch
            t0 = time.monotonic()
            if s.stage == "train":
                # resumed mid-epoch: the epoch began ceil(batches done / accumulation) steps ago
                began = s.step - (-(-s.batch // p.grad_accumulation))
                p.bus.emit(EpochStarted(epoch=e, epochs=p.epochs, step=max(began, 0)))
                if s.batch == 0:
                    s.epoch_metrics = {}
                res = self.train_epoch(train, s, start_batch=s.batch)
                self.record(p.train_phase.split, res)
                s.stage = "valid"
                s.valid_rng = rng_state()
            if s.stage == "valid":
                by_steps = p.validate_every_n_steps > 0
                at_end = e >= p.epochs or (p.max_steps and s.step >= p.max_steps)
                if (
                    valid is not None
                    and s.step != s.valid_at
                    and ((not by_steps and e % p.validate_every == 0) or (by_steps and at_end))
                ):
                    self.validate(s)
                s.stage = "done"
                s.valid_rng = None
            for name, sched in p.schedulers.items():
                if p.scheduler_intervals[name] == "epoch":
                    sched.step()
            stop_early = False
            # by steps, early stopping counts each validation once: where it ran (mid-epoch, or here)
            if es is not None and (not p.validate_every_n_steps or s.valid_at == s.step):
                stop_early = es.update(s.epoch_metrics, e)
            p.bus.emit(
                EpochCompleted(
                    epoch=e, epochs=p.epochs, step=s.step, metrics=dict(s.epoch_metrics), duration=time.monotonic() - t0
                )
            )
            last = e >= p.epochs or stop_early or s.stop_reason == "max_steps"  # the final save follows
            save = p.saving.decide(EpochEnd(e, last=bool(last), due=self.checkpoint_due))
            if save is not None:
                p.save(save.reason, save.requested)
            self.checkpoint_due = None
            if stop_early and es is not None:  # (only early stopping stops early)
                p.bus.emit(OutputPrinted(text=es.message, stream="tuitrain"))
                return "early_stopping"
            if s.stop_reason == "max_steps":
                return "max_steps"
            self.at_boundary(s)
            s.epoch, s.batch, s.stage = e + 1, 0, "train"
        s.epoch = min(s.epoch, max(p.epochs, 1))
        s.stage = "done"
        return "epochs"

    def record(self, split: str, values: dict[str, Any]) -> None:
        s = self.parts.state
        for k, v in values.items():
            key = f"{split}/{k}"
            s.epoch_metrics[key] = v
            s.history.setdefault(key, []).append([s.epoch, v])

    # --- a phase's start and end ---------------------------------------------------------------

    def begin(self, phase: Phase, state: TrainState, metrics: MetricSet, batches: int, fresh: bool) -> None:
        """Reset the split's metrics (unless resuming mid-phase), say PhaseStarted, set the mode."""
        p = self.parts
        if fresh:
            metrics.start_phase()
        p.bus.emit(
            PhaseStarted(phase=phase.name, split=phase.split, epoch=state.epoch, step=state.step, batches=batches)
        )
        state.phase = phase.name
        self.phase = phase
        p.model().train(phase.training)

    def finish(self, phase: Phase, state: TrainState, metrics: MetricSet) -> dict[str, Any]:
        """The phase's aggregates: one epoch-scope MetricsLogged, then PhaseCompleted."""
        bus = self.parts.bus
        result = metrics.read_phase()
        if result:
            bus.emit(
                MetricsLogged(split=phase.split, epoch=state.epoch, step=state.step, metrics=result, scope="epoch")
            )
        bus.emit(
            PhaseCompleted(
                phase=phase.name,
                split=phase.split,
                epoch=state.epoch,
                step=state.step,
                metrics=result,
                duration=metrics.ctx.phase_time,
                items=metrics.ctx.phase_items,
            )
        )
        return result

    # --- one epoch of training -----------------------------------------------------------------

    def train_epoch(self, loader: ResumableLoader, state: TrainState, start_batch: int = 0) -> dict[str, Any]:
        p = self.parts
        phase = p.train_phase
        metrics = p.metric_sets[phase.split]
        bus = p.bus
        wants_steps = bus.wants_steps
        total = loader.batches_per_epoch()
        manual = phase.manual_optimization
        accum = 1 if manual else p.grad_accumulation
        self.begin(phase, state, metrics, total, fresh=start_batch == 0)
        autocast, backward, optimizer_step = p.step_calls()
        if (
            self.plain_allowed
            and accum == 1
            and not manual
            and autocast is None
            and optimizer_step is None
            and not wants_steps
            and phase.plain_parts(p.learner) is not None
            and not metrics.times_data
            and all(type(m) is Loss for m in metrics.batch_metrics)
        ):
            return self.plain_epoch(loader, state, start_batch, metrics, total)
        i = start_batch
        in_group = 0
        group_div = float(min(accum, total - i)) if total else float(accum)
        # locals: this loop runs per batch, and attribute lookups are most of its own cost
        step_fn, items_of, update, ctx = bound_step(phase, p.learner), phase.items_of, metrics.update, metrics.ctx
        if optimizer_step is None:  # the plain form, inlined below: step, then clear the gradients
            opt_step, zero_grad = p.optimizer.step, p.optimizer.zero_grad
        move, device, non_blocking = p.move_batches, p.device, p.non_blocking
        after_step = self.after_step  # the log, a due checkpoint, the step boundary, max_steps
        sample = StepSampler.of(bus, phase.name)
        n = group_items = 0  # items of this batch, of this optimizer step's batches
        judge = Judge(p, state, grads=optimizer_step is None and not manual)
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
                        p.end_manual_step()
                    else:
                        backward(loss / group_div if group_div != 1.0 else loss)
                    if loss is not None:
                        v, bad = judge.loss(loss, state, i)
                        if v is not loss:  # read back as a float
                            out.value = float(v)
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
                        bus.emit_step(
                            StepCompleted(phase=phase.name, epoch=state.epoch, step=step, batch=i, items=group_items)
                        )
                    elif sample is not None:
                        sample(state.epoch, step, i, group_items)
                    group_items = 0
                    if after_step(metrics, phase.split, state, i, total):
                        break
        except CancelEpoch:
            pass
        if in_group:  # an iterable of unknown length ended inside a group: still step
            if not manual:
                p.optimizer_step()
            state.step += 1
            metrics.step_done()
        if sample is not None:
            sample.flush()
        return self.finish(phase, state, metrics)

    def plain_epoch(
        self, loader: ResumableLoader, state: TrainState, start_batch: int, metrics: MetricSet, total: int
    ) -> dict[str, Any]:
        """`train_epoch` for the common case, step for step the same: the default (inputs, targets)
        step, a plain optimizer step per batch, the loss as the only per-batch metric and no callback
        that takes every step (sampled ones may). It makes no call that case does not need (no
        StepOutput and no metric dispatch per batch)."""
        p = self.parts
        phase = p.train_phase
        plain = phase.plain_parts(p.learner)
        assert plain is not None  # train_epoch runs this body only then
        model, loss_fn = plain
        loss_metric = metrics.batch_metrics[0] if metrics.batch_metrics else None
        judge = Judge(p, state, grads=True)
        # CPU: the loss is read back per step (judged), added as a float; else as a tensor
        add_loss: Callable[[Any, int, float], None] | None = None
        if loss_metric is not None:
            assert isinstance(loss_metric, Loss)  # (the only per-batch metric here)
            add_loss = loss_metric.add_float if judge.every_step else loss_metric.add_tensor
        opt_step, zero_grad = p.optimizer.step, p.optimizer.zero_grad
        ctx, after_step = metrics.ctx, self.after_step
        move, device, non_blocking = p.move_batches, p.device, p.non_blocking
        Tensor = torch.Tensor
        tokens = phase.count_tokens
        sample = StepSampler.of(p.bus, phase.name)
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
                        n = (
                            (target.numel() if tokens else target.shape[0])
                            if isinstance(target, Tensor) and target.dim()
                            else batch_size_of(batch)
                        )
                    else:  # a mapping (model(**batch)), or the default step's error for other shapes
                        out = phase.step(p.learner, batch)
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

    def valid_epoch(self, loader: ResumableLoader, state: TrainState) -> dict[str, Any]:
        p = self.parts
        phase = p.valid_phase
        metrics = p.metric_sets[phase.split]
        bus, interrupter = p.bus, p.interrupter
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
                    if p.move_batches:
                        batch = move_to(batch, p.device, p.non_blocking)
                    try:
                        with p.autocast():
                            out = phase.step(p.learner, batch)
                        if type(out) is not StepOutput:
                            out = StepOutput.of(out)
                        n = phase.items_of(out, batch)
                        metrics.update(out, n)
                        metrics.step_done()
                        state.last = out
                    except CancelStep:
                        n = 0
                    if wants_steps:
                        bus.emit_step(
                            StepCompleted(phase=phase.name, epoch=state.epoch, step=state.step, batch=i + 1, items=n)
                        )
                    elif sample is not None:
                        sample(state.epoch, state.step, i + 1, n)
                    tick()  # validation emits nothing per batch: the run's chores come by here
                    if interrupter.pending:
                        self.at_boundary(state)
        except CancelEpoch:
            pass
        finally:
            p.model().train()
        if sample is not None:
            sample.flush()
        return self.finish(phase, state, metrics)

    def validate(self, state: TrainState) -> None:
        """One validation now (the averaged weights with EMA), recorded as the epoch's valid metrics."""
        p = self.parts
        assert self.valid_loader is not None  # a validation runs only where there is validation data
        with p.ema.swapped_in() if p.ema is not None else contextlib.nullcontext():
            res = self.valid_epoch(self.valid_loader, state)
        self.record(p.valid_phase.split, res)
        state.valid_at = state.step
        if not res and p.metric_sets[p.valid_phase.split].metrics and not self.said_no_valid:
            self.said_no_valid = True  # an empty validation set: said once, not passed over in silence
            text = "validation ran on no batch (the validation data is empty): no valid metrics, so what watches"
            p.bus.emit(
                OutputPrinted(text=text + " them (checkpoint.monitor, early stopping) never acts", stream="tuitrain")
            )

    def validate_mid_epoch(self, state: TrainState) -> None:
        """`validate_every_n_steps`: validate inside the training phase, which then goes on as if
        nothing happened (its RNG, its phase); early stopping and "best" checkpoints follow."""
        p = self.parts
        if self.valid_loader is None:
            return
        rng, phase, name = rng_state(), self.phase, state.phase
        self.validating = True
        try:
            self.validate(state)
        finally:
            self.validating = False
            set_rng_state(rng)
            self.phase, state.phase = phase, name
            p.model().train(True)
        if phase is not None:  # the progress shown is training's again
            p.bus.emit(
                PhaseStarted(
                    phase=phase.name, split=phase.split, epoch=state.epoch, step=state.step, batches=self.epoch_batches
                )
            )
        es = p.early_stopping
        if es is not None and es.update(state.epoch_metrics, state.epoch):
            p.bus.emit(OutputPrinted(text=es.message, stream="tuitrain"))
            raise CancelFitting("early_stopping")

    # --- after a step, at a boundary -----------------------------------------------------------

    def log_step(self, metrics: MetricSet, split: str, state: TrainState, batch: int, total: int) -> None:
        p = self.parts
        if not p.solo_boundaries:  # a finished write's events go out here, not at a boundary
            p.ckpt_io.flush_events()
        values = metrics.read_window()
        if split == "train":
            p.guard.judge_logged(values, state)  # data_wait; a non-finite mean the steps did not judge
        state.last_logged = values
        p.bus.emit(
            MetricsLogged(
                split=split,
                epoch=state.epoch,
                step=state.step,
                metrics=values,
                scope="step",
                batch=batch,
                batches=total,
            )
        )

    def after_step(
        self, metrics: MetricSet, split: str, state: TrainState, batch: int, total: int, last: Last | None = None
    ) -> bool:
        """What happens after every optimizer step, in every training loop (the plain one too): the
        metrics logged every `log_every_n_steps`, a step checkpoint marked due, the step boundary
        visited when anything waits there (a control request, a due checkpoint or validation, a finished
        write's events), and `max_steps`. `last`: (loss, output, target, items) when the loop has not
        kept a StepOutput. True: training ends here (max_steps)."""
        p = self.parts
        step = state.step
        ckpt = p.ckpt_io.checkpointer
        if step % p.log_every_n_steps == 0:
            if last is not None:
                state.last = StepOutput(*last)
            self.log_step(metrics, split, state, batch, total)
        if ckpt is not None:
            if self.step_saves:
                due = p.saving.decide(StepDone(step))
                if due is not None:
                    self.checkpoint_due = due
            # ranks enter boundaries together: never for one rank's finished write (see log_step)
            events = p.solo_boundaries and ckpt.has_events
        else:
            events = False
        if p.interrupter.pending or self.checkpoint_due is not None or events:
            if last is not None:
                state.last = StepOutput(*last)
            self.at_boundary(state)
        media = p.media  # [log] samples and histograms
        if media is not None and step >= media.next_step:
            media.at_step(step)
        if p.max_steps and step >= p.max_steps:
            state.stop_reason = "max_steps"
            return True
        return False

    def at_boundary(self, state: TrainState) -> None:
        """Apply control requests (the run's `Lifecycle`: said, a checkpoint asked for, a pause), a due
        validation or checkpoint; raises CancelFitting on a stop."""
        p = self.parts
        it = p.interrupter
        it.sync()  # ranks: every one holds the same flags from here (one process: nothing)
        if it.failure:
            p.write_failed()
        if self.valid_due and not self.validating:
            self.valid_due = False
            self.validate_mid_epoch(state)
        p.ckpt_io.flush_events()
        life = p.lifecycle
        life.report()
        if self.checkpoint_due is not None:
            # at an epoch's last step it waits for the epoch's end: one file
            held = self.validating or (state.stage == "train" and state.batch == self.epoch_batches)
            save = p.saving.decide(Boundary(self.checkpoint_due, held=held))
            if save is not None:
                self.checkpoint_due = None
                p.save(save.reason, save.requested)
        life.boundary(state.epoch, state.step)
        it.settle()
        if it.failure:
            p.write_failed()
        if it.stop_requested:
            raise CancelFitting(it.stop_reason)
