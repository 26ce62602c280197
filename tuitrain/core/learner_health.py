"""The Learner's health side: the `[watch]` rules (tuitrain.core.health) judged at the loop's points,
and their actions carried out: an alert, a skipped update, a rollback to the checkpoint before the
trouble, a graceful stop, a failure, and for a stall (the watchdog thread) an alert or an abort.

`HealthGuard` is a collaborator the Learner owns (`learner.guard`), given what it acts on when it is
built. Must not import textual.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import checkpoint as ckpt
from .events import OutputPrinted, RolledBack, StepSkipped
from .health import Health, Watchdog, thread_stacks
from .lifecycle import run_failed
from .rules.base import Rule, Verdict
from .verdicts import alert_event
from .state import CancelFitting, HealthFailure, NonFiniteLoss, RollBack, TrainState

if TYPE_CHECKING:
    from .callbacks import EventBus
    from .control import Interrupter
    from .data import ResumableLoader
    from .learner_checkpoint import CheckpointIO, Scaling
    from .strategies.base import Strategy


def _plain(v: float | None) -> float | None:
    return float(v) if v is not None else None


class TotalNorm:
    """`float(torch.nn.utils.get_total_norm(grads))` of `params`' gradients, bit for bit, for a loop to bind
    once per epoch (as it binds the model): the parameters listed once, and where they are all of one
    device (the CPU or CUDA) and dtype, as their gradients are, and every gradient is a plain Tensor,
    the two kernels get_total_norm runs then (`torch._foreach_norm`, the 2-norm of their stack) called
    without its grouping by device and dtype. Anything else: get_total_norm itself. None: no gradients."""

    __slots__ = ("params", "direct")

    def __init__(self, params: Iterable[torch.nn.Parameter]) -> None:
        self.params = list(params)
        kinds = {(p.device, p.dtype) for p in self.params}
        self.direct = len(kinds) == 1 and next(iter(kinds))[0].type in ("cpu", "cuda")

    def __call__(self) -> float | None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return None
        if self.direct and all(type(g) is torch.Tensor and not g.requires_grad for g in grads):
            return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0))
        return float(torch.nn.utils.get_total_norm(grads))


class HealthGuard:
    """Judges the `[watch]` rules (`health`, a `Health`) and acts on their verdicts: events on `bus`, a
    stop through `interrupter`, an update not applied (`optimizers`, the `precision`'s scaler), a
    rollback through `ckpt_io`, and the stall watchdog."""

    def __init__(
        self,
        *,
        health: Health,
        bus: EventBus,
        state: TrainState,
        interrupter: Interrupter,
        strategy: Strategy,
        optimizers: dict[str, torch.optim.Optimizer],
        schedulers: dict[str, Any],
        precision: Scaling,
        ckpt_io: CheckpointIO,
        log_every: int,
        check_every_step: bool,
        run_dir: Path | None = None,
    ) -> None:
        self.health = health
        self.bus, self.state, self.interrupter, self.strategy = bus, state, interrupter, strategy
        self.world_size = strategy.world_size
        self.optimizers, self.schedulers, self.precision, self.ckpt_io = optimizers, schedulers, precision, ckpt_io
        self.run_dir = run_dir
        #: the loss is on the host every step anyway (the CPU): every step is judged; else logged steps only
        self.check_every_step = check_every_step
        #: steps apart that the gradients' norm is judged in loops that step the optimizer themselves
        self.judge_grads_every = log_every if health.judges_grads else 0
        self._watchdogs: list[Watchdog] = []
        #: what an abort on a stall does last (the process cannot be trusted to end on its own)
        self.on_abort: Callable[[], None] = lambda: os._exit(1)

    @property
    def judge_logged_loss(self) -> bool:
        """The loss judged before the optimizer step on the steps that log, where it is not on the host anyway."""
        return not self.check_every_step and self.health.judges_logged_loss

    # --- judging -------------------------------------------------------------------------------

    def judge_loss(self, v: float, state: TrainState, batch: int) -> bool:
        """The step's loss `v` (a float on the host), before its update. True: do not apply it."""
        verdict = self.health.loss(v, state.step + 1)
        return verdict is not None and self._act(verdict, state, [batch], "loss")

    def judge_grads(self, norm_of: TotalNorm, state: TrainState, batches: list[int]) -> bool:
        """The gradients' total norm (`norm_of`, bound by the loop), before the update. True: do not apply it."""
        norm = norm_of()
        return norm is not None and self.judge_grad_norm(norm, state, batches)

    def judge_grad_norm(self, norm: float, state: TrainState, batches: list[int]) -> bool:
        verdict = self.health.grads(norm, state.step + 1)
        return verdict is not None and self._act(verdict, state, batches, "gradients")

    def judge_logged(self, values: dict[str, Any], state: TrainState) -> None:
        """At a logged step (after its update): the rules that read its values (data_wait; a non-finite
        mean where steps are not judged one by one, a window's mean read from an accelerator)."""
        for verdict in self.health.logged(values, state.step, self.check_every_step):
            self._act(verdict, state, [], "loss", at=state.step)

    # --- acting --------------------------------------------------------------------------------

    def _emit_alert(self, verdict: Verdict, action: str, step: int, epoch: int, text: str | None = None) -> None:
        self.bus.emit(alert_event(verdict, step, epoch, action, text))

    def _act(self, verdict: Verdict, state: TrainState, batches: list[int], what: str, at: int | None = None) -> bool:
        step = state.step + 1 if at is None else at
        action, text = verdict.action, verdict.text
        if self.world_size > 1 and action in ("skip", "rollback") and (what == "loss" or action == "rollback"):
            # each rank judges its own loss, and a rollback is one process's: every rank stops together instead
            action = "stop"
            text += f" (a {verdict.action} under {self.world_size} processes: training stops instead, on every rank)"
        self._emit_alert(verdict, action, step, state.epoch, text)
        if action == "alert":
            return False
        if action == "fail":
            raise NonFiniteLoss(verdict.value, state.epoch, step, what)
        if action == "rollback":
            raise RollBack(verdict, state.epoch, batches, step)
        if action == "stop":
            if self.world_size == 1 and at is None:  # one process: the update is not applied, and the stop's
                self.skip_update()  # checkpoint holds the weights from before the trouble
                raise CancelFitting("stopped")
            self.interrupter.request_stop("watch", verdict.title)  # ranks: every one stops at the agreed step
            return False
        self.bus.emit(
            StepSkipped(
                step=step,
                epoch=state.epoch,
                batch=batches[-1] if batches else state.batch,
                rule=verdict.rule,
                value=_plain(verdict.value),
            )
        )
        return True

    def skip_update(self) -> None:
        """The update not applied: the gradients cleared, nothing stepped."""
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)
        if self.precision.scaler is not None and self.precision.unscaled:
            self.precision.scaler.update()  # unscale_ was called this step: the scaler's per-step record ends here
        self.precision.unscaled = False

    # --- rollback ------------------------------------------------------------------------------

    def roll_back(self, rb: RollBack, train: ResumableLoader, load: Callable[[dict[str, Any]], None]) -> None:
        """Back to the newest sound checkpoint before the trouble, the offending batches passed over
        from now on, the lr scaled; HealthFailure when there is none or `max_rollbacks` are spent."""
        w = self.health.watch
        self.skip_update()  # the offending backward's gradients go with it
        self.ckpt_io.finish()
        if self.health.rollbacks >= w.max_rollbacks:
            raise HealthFailure(
                f"{rb.verdict.title}, and {self.health.rollbacks} rollback(s) already "
                f"(watch.max_rollbacks = {w.max_rollbacks}): training stops as failed"
            )
        path = None
        checkpointer = self.ckpt_io.checkpointer
        if checkpointer is not None:
            for e in sorted(checkpointer.entries(), key=lambda e: (e.step, e.time), reverse=True):
                p = checkpointer.folder / e.file
                if e.step < rb.step and p.is_file() and not ckpt.damaged(p):
                    path = p
                    break
        if path is None:
            raise HealthFailure(
                f"{rb.verdict.title}: no sound checkpoint before step {rb.step} to roll back "
                "to (set checkpoint.every_n_steps so that there is one)"
            )
        data = ckpt.load_checkpoint(path)
        skips = {tuple(x) for x in self.state.skip_batches} | {(rb.epoch, b) for b in rb.batch}
        rollbacks = self.health.rollbacks + 1
        load(data)  # the Learner's load_state_dict (a subclass's own included)
        self.health.rollbacks = rollbacks
        self.state.skip_batches = sorted([list(x) for x in skips])
        self.ckpt_io.follow(train)  # the checkpoint's position in the data
        factor = w.rollback_lr_factor
        if factor != 1.0:
            for opt in self.optimizers.values():
                for group in opt.param_groups:
                    group["lr"] *= factor
                    if "initial_lr" in group:
                        group["initial_lr"] *= factor
            for sched in self.schedulers.values():
                if hasattr(sched, "base_lrs"):
                    sched.base_lrs = [lr * factor for lr in sched.base_lrs]
        self.ckpt_io.forget_last()  # the state from here on is new: checkpoints are written again
        s = self.state
        self.bus.emit(
            RolledBack(
                from_step=rb.step,
                to_step=s.step,
                checkpoint=str(path),
                skipped_batches=[list(x) for x in self.state.skip_batches],
                lr_factor=factor,
                rule=rb.verdict.rule,
                rollbacks=rollbacks,
            )
        )

    def _append_to_log(self, block: str) -> None:
        """One write appended to RUN_DIR/experiment.log (another process writes it too: O_APPEND)."""
        if self.run_dir is None:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        lines = block.rstrip("\n").split("\n")
        text = f"{stamp} ERROR {lines[0]}\n" + "".join(f"    {line}\n" for line in lines[1:])
        try:
            fd = os.open(self.run_dir / "experiment.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, text.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except OSError:
            pass

    # --- the stall watchdog --------------------------------------------------------------------

    def start_watchdog(self) -> None:
        """A watchdog thread for every rule that reads "stall" (the step counter, read from its thread)."""
        s = self.state
        it = self.interrupter
        for rule in self.health.reading("stall"):
            self._watchdogs.append(
                Watchdog(
                    rule.patience,
                    progress=lambda: (s.step, s.batch, s.stage, id(s.last)),
                    on_stall=functools.partial(self._stalled, rule),
                    idle=lambda: bool(it.paused),
                ).start()
            )

    def stop_watchdog(self) -> None:
        for watchdog in self._watchdogs:
            watchdog.close()
        self._watchdogs = []

    def _stalled(self, rule: Rule, seconds: float) -> None:
        """From a watchdog thread: no step completed for `seconds`; `rule`'s verdict ("alert": every
        thread's stack to the log; "abort": the run fails as stalled and the process ends)."""
        s = self.state
        where = f"at step {s.step}, epoch {s.epoch}, in {s.phase or s.stage}"
        stacks = thread_stacks()
        verdict = rule.judge_stall(seconds, where)
        if verdict is None:
            return
        if verdict.action == "alert":
            self._emit_alert(verdict, "alert", s.step, s.epoch, verdict.text + "; every thread's stack is in the log")
            self.bus.emit(OutputPrinted(text="stalled: every thread's stack\n" + stacks, stream="log"))
            return
        last = None
        if self.ckpt_io.checkpointer is not None:
            try:
                last = ckpt.latest_checkpoint(self.ckpt_io.checkpointer.folder)
            except Exception:
                last = None
        text = verdict.text + "; the run is aborted" + (f", its last sound checkpoint {last}" if last else "")
        if self.world_size > 1:
            text += f" (rank {self.strategy.rank})"
        self._emit_alert(verdict, "abort", s.step, s.epoch, text)
        if self.strategy.writes:
            self.bus.emit(
                run_failed(
                    f"stalled: {verdict.text}",
                    traceback=stacks,
                    epoch=s.epoch,
                    step=s.step,
                    duration=s.training_time(),
                    cause="stalled",
                    checkpoint=str(last or ""),
                )
            )
        else:  # another rank writes the run's events: this one's stacks go to its output and experiment.log
            block = f"tuitrain: rank {self.strategy.rank}: {text}; every thread's stack:\n{stacks}"
            print(block, file=sys.stderr, flush=True)
            self._append_to_log(block)
        if self.world_size > 1:  # the peers' watchdogs (stalled in a collective) write their stacks too
            time.sleep(min(3.0, max(0.5, rule.patience / 4)))
        try:
            self.bus.deliver()
            self.bus.close()
        except Exception:
            pass
        inbox = getattr(self.interrupter, "inbox", None)  # ranks: the requests' own interrupter
        for it in (self.interrupter, inbox):
            for hook in list(getattr(it, "before_abort", ())):
                try:
                    hook()  # a dashboard gives the terminal back before the process ends
                except Exception:
                    pass
        time.sleep(0.05)
        self.on_abort()
