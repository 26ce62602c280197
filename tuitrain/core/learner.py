"""The Learner: runs phases over epochs, applies control at step boundaries, checkpoints, emits events.

Everything that leaves the loop is an event on `learner.bus`; the loop reads the `Interrupter` flags at
step boundaries and never waits on a UI. What writes the events somewhere is given to it (`sinks`,
`callbacks`, or a `bus` that has them): the core imports nothing of tuitrain outside `tuitrain.core`,
and never textual. `tuitrain.Learner` (tuitrain/run/learner.py) adds a run directory's standard files.

The loops over an epoch's batches are in loop.py (a phase, phases.py, is the step). What happens after
every optimizer step, in every training loop, is `Learner.after_step` (the log every N steps, a due
checkpoint, the step boundary `at_boundary` with the control requests, max_steps); what happens at an
epoch's end is `_epochs`. How a rank differs is its `strategy` (strategies/base.py).

The Learner owns four collaborators, each built with what it works on (none holds the Learner):
`amp` and `optimization` (optimization.py: precision, backward, optimizer steps), `checkpoints`
(learner_checkpoint.py: what a checkpoint holds, saving and loading it, model.pt) and `guard`
(learner_health.py: the `[watch]` rules' verdicts acted on, rollback, the stall watchdog). The methods
a step of one's own calls (`backward`, `step_optimizer`, `zero_grad`, `autocast`, `fire`) and
`state_dict`/`load_state_dict`/`save_checkpoint` stay on the Learner and hand over to them.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import platform
import time
import traceback
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from . import checkpoint as ckpt
from . import flops
from . import heap
from .callbacks import EventBus
from .control import Interrupter, stop_asked_for
from .data import ResumableLoader, build_loader, rng_state, seed_everything, set_rng_state
from .early_stopping import EarlyStopping
from .ema import WeightAverage
from .control import parse_duration
from .events import (ControlReceived, EpochCompleted, EpochStarted, MetricsLogged, OutputPrinted, PhaseStarted,
                     RunFailed, RunFinished, RunPaused, RunResumed, RunStarted, StepPoint)
from .health import Health, Watch
from .learner_checkpoint import Checkpoints
from .learner_health import HealthGuard
from .metrics import MetricSet, StepOutput
from .optimization import Optimization, Precision
from .output import capture_output
from .phases import CancelFitting, NonFiniteLoss, Phase, TrainPhase, ValidPhase
from .schedules import say as say_stretched
from .state import HealthFailure, RollBack
from .strategies.base import Strategy

#: stop reasons that end a run as interrupted (exit 130); others ("max_time") end it as completed
INTERRUPTING = ("stopped", "preempted")

from .state import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, FitResult, RunDirUnwritable,  # noqa: F401
                    TrainState)


def out_of_memory(e: BaseException) -> bool:
    """CUDA's (or MPS's) out-of-memory error, or a MemoryError on the CPU."""
    if isinstance(e, MemoryError) or isinstance(e, getattr(torch, "OutOfMemoryError", ())):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def resolve_device(spec: str | torch.device = "auto") -> torch.device:
    if isinstance(spec, torch.device):
        return spec
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {spec!r} requested but CUDA is not available")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise RuntimeError(f"device {spec!r} requested but only {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("device 'mps' requested but MPS is not available")
    return dev


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def env_info(device: torch.device) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
            "host": platform.node(), "cpus": os.cpu_count(), "cpu": _cpu_name(), "device": str(device),
            "cuda": torch.version.cuda if torch.cuda.is_available() else None}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def _seconds(t: float) -> str:
    """3725.0 -> "1h2m5s"."""
    t = int(round(t))
    h, rest = divmod(t, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"


def _own_step(phase: Phase) -> bool:
    return type(phase).step is not Phase.step


def summarize(history: dict) -> dict:
    out = {}
    for key, rows in history.items():
        vals = [(v, e) for e, v in rows if isinstance(v, (int, float)) and not math.isnan(v)]
        if not vals:
            continue
        lo = min(vals, key=lambda t: t[0])
        hi = max(vals, key=lambda t: t[0])
        out[key] = {"min": lo[0], "min_epoch": lo[1], "max": hi[0], "max_epoch": hi[1], "last": rows[-1][1]}
    return out


class _Held:
    """A Learner attribute that one of its collaborators holds (`part`): read and set there."""

    def __init__(self, part: str) -> None:
        self.part = part

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(getattr(obj, self.part), self.name)

    def __set__(self, obj, value) -> None:
        setattr(getattr(obj, self.part), self.name, value)


class Learner:
    """Trains `model` with `optimizer`; `fit(train, valid)` returns a FitResult.

    `train`/`valid` may be Datasets (loaders are built with `batch_size`, `shuffle`, `num_workers`) or
    DataLoaders. Metrics are names ("loss", "accuracy", "top5_accuracy", "lr", "throughput",
    "step_time", "tflops", "mfu", "max_memory", ...), `Metric` objects or torchmetrics metrics.
    `flops_per_step` (0: counted on the first batch) and `peak_tflops` (0: the GPU table's) serve
    tflops and mfu.

    Several models: `model`, `optimizer` (and `scheduler`, `scheduler_interval`) are dicts keyed by name
    ({"generator": G, "discriminator": D}), read as `learner.models[name]` and `learner.optimizers[name]`
    by a `CustomTrainPhase`; one model is `learner.model`, also `learner.models["model"]`.
    """

    #: `gc.freeze()` what exists when training starts (the model, the data, every imported module),
    #: unfrozen when it ends: the collector's full passes, which walked those hundreds of thousands
    #: of objects (50-80 ms each, a few per run, some in the middle of a checkpoint), skip them
    freeze_gc = True
    #: keep memory freed by one step in the process for the next (glibc's trim and mmap thresholds
    #: raised, see `tuitrain.core.heap`), and give it back when training ends: a step's large blocks
    #: otherwise return to the kernel and come back page fault by page fault
    keep_freed_memory = True

    def __init__(self, model: torch.nn.Module | dict, optimizer: torch.optim.Optimizer | dict, *, loss_fn=None,
                 scheduler=None, scheduler_interval: str | dict = "step",
                 train_metrics: Sequence = ("loss",), valid_metrics: Sequence = ("loss",),
                 callbacks: Iterable = (), epochs: int = 1, max_steps: int = 0, grad_accumulation: int = 1,
                 clip_grad_norm: float = 0.0, precision: str = "32", device: str | torch.device = "auto",
                 validate_every: int = 1, log_every_n_steps: int = 10, seed: int | None = None,
                 batch_size: int = 32, shuffle: bool = True, num_workers: int = 0,
                 interrupter: Interrupter | None = None, checkpointer: ckpt.Checkpointer | None = None,
                 early_stopping: EarlyStopping | None = None, run_dir: str | os.PathLike | None = None,
                 train_phase: Phase | None = None, valid_phase: Phase | None = None,
                 capture_output: bool = False, config: dict | None = None, experiment: str = "",
                 bus: EventBus | None = None, model_path: str | os.PathLike | None = None,
                 env: dict | None = None, notes: Sequence[str] = (), sinks: Iterable = (),
                 max_time: float | str = 0, ema_decay: float = 0.0, validate_every_n_steps: int = 0,
                 limit_valid_batches: int = 0, throughput_unit: str = "samples", strategy: Strategy | None = None,
                 watch: dict | None = None, flops_per_step: float = 0.0, peak_tflops: float = 0.0) -> None:
        #: how this process trains among others (one process, a DDP or FSDP rank): strategies/base.py
        self.strategy = strategy = strategy if strategy is not None else Strategy()
        self.world_size = strategy.world_size
        if strategy.device is not None:
            device = strategy.device
        if seed is not None:
            seed = seed + strategy.rank  # each rank its own random stream (dropout, augmentation)
        if grad_accumulation < 1 or epochs < 0 or max_steps < 0 or log_every_n_steps < 1 or validate_every < 1:
            raise ValueError("grad_accumulation, log_every_n_steps, validate_every must be >= 1; epochs, "
                             "max_steps >= 0")
        self.device = resolve_device(device)
        # several models (a dict): one ModuleDict, so that .to/.train/state_dict cover them all
        self.models = dict(model) if isinstance(model, dict) else {"model": model}
        self.raw_model = (torch.nn.ModuleDict(self.models) if isinstance(model, dict) else model).to(self.device)
        self._model = self.raw_model
        self.train_model: torch.nn.Module | None = None  # what training calls instead (DDP's wrapper)
        #: called before each micro-batch's forward (a strategy's gradient sync); None: nothing
        self.before_micro_batch = None
        self.optimizers = dict(optimizer) if isinstance(optimizer, dict) else {"model": optimizer}
        self.optimizer = next(iter(self.optimizers.values()), None)
        self.loss_fn = loss_fn
        first = next(iter(self.optimizers), "model")
        # schedulers and their intervals are keyed by the name of the optimizer each one drives
        if isinstance(scheduler, dict):
            self.schedulers = {k: v for k, v in scheduler.items() if v is not None}
        else:
            self.schedulers = {first: scheduler} if scheduler is not None else {}
        self.scheduler_intervals = {k: scheduler_interval.get(k, "step") if isinstance(scheduler_interval, dict)
                                    else scheduler_interval for k in self.schedulers}
        self.phase: Phase | None = None  # the phase running now (set by Phase.begin)
        self.epochs, self.max_steps = epochs, max_steps
        #: seconds of training (over every resume) after which the run stops as completed; 0: none
        self.max_time = parse_duration(max_time) if isinstance(max_time, str) else float(max_time)
        if self.max_time < 0:
            raise ValueError(f"max_time must be 0 or more seconds, not {max_time!r}")
        self.grad_accumulation = grad_accumulation
        self.validate_every = validate_every
        for name, value in (("validate_every_n_steps", validate_every_n_steps),
                            ("limit_valid_batches", limit_valid_batches)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number of 0 or more, not {value!r}")
        #: > 0: validate every N optimizer steps (and at the end) instead of at the end of epochs
        self.validate_every_n_steps = validate_every_n_steps
        self.limit_valid_batches = limit_valid_batches  # > 0: at most this many validation batches
        self._valid_due = False
        self._validating = False
        self._valid_loader = None
        self.log_every_n_steps = log_every_n_steps
        self.seed = seed
        self.batch_size, self.shuffle, self.num_workers = batch_size, shuffle, num_workers
        self.interrupter = strategy.interrupter(interrupter or Interrupter(), lambda: self.state.stage)
        self.train_phase = train_phase or TrainPhase()
        self.valid_phase = valid_phase or ValidPhase()
        if len(self.models) > 1 and type(self.train_phase).step is Phase.step:
            raise ValueError(f"several models ({', '.join(self.models)}) need a training phase with its own "
                             "step: subclass CustomTrainPhase ([train] phase = \"module:Class\")")
        self.capture_output = capture_output
        self.experiment = experiment
        self.env_extra = dict(env or {})  # added to RunStarted.env (the runner's git commit, ...)
        self.notes = list(notes)  # said in the log right after RunStarted
        #: given the config a checkpoint holds, why this run's length differs from that run's ("train.epochs
        #: changed 3 -> 5"), said with the schedules a resume stretched to this run's length (None: not said)
        self.length_change: Callable[[dict], str] | None = None
        self.run_dir = Path(run_dir) if run_dir is not None else None
        model_path = Path(model_path) if model_path is not None else None
        if self.run_dir is not None:
            model_path = model_path or self.run_dir / "model.pt"
            if checkpointer is None:
                checkpointer = ckpt.Checkpointer(self.run_dir / "checkpoint")
        if not strategy.writes:  # another rank writes the run's files
            model_path = None
        if bus is None:
            bus = EventBus()
        for sink in sinks:  # writers of the event stream (files, a console): persistent events only
            bus.subscribe(sink, steps=False)
        #: an exponential moving average of the weights (`ema_decay` > 0): validated, checkpointed, in model.pt
        self.ema = WeightAverage(self.raw_model, ema_decay) if ema_decay else None
        if self.ema is not None:
            self.ema.follow(self.optimizers.values())
        if self.validate_every_n_steps and self.optimizer is not None:
            self.optimizer.register_step_post_hook(self._count_step)
        self.bus = bus
        # a sink that cannot write the run directory (a full disk) ends the run at the next step
        bus.on_write_failure.append(self.interrupter.fail)
        if bus.write_failure is not None:
            self.interrupter.fail(bus.write_failure[0])
        for cb in callbacks:
            self.bus.subscribe(cb)
        # a name that is not built in is a value the step returns ({"loss": ..., "perplexity": ...});
        # the other named scalars a step returns are logged too, under their own names
        self.metric_sets = {
            "train": MetricSet(train_metrics, self.optimizer, step_values=True),
            "valid": MetricSet(valid_metrics, self.optimizer, step_values=True)}
        #: the `grad_norm` metric, when asked for: the loop computes the norm on logged steps only
        self._grad_norm = self.metric_sets["train"].grad_norm
        # tflops, mfu, max_memory: the FLOPs of a step (given, or counted on the first batch) and the peak
        self._step_flops = flops.setup(
            self.metric_sets, self.device, flops_per_step, peak_tflops, models=self.models.values(),
            optimizers=self.optimizers.values(), batches_per_step=1 if getattr(
                self.train_phase, "manual_optimization", False) else grad_accumulation,
            position=lambda: (self.state.epoch, self.state.batch) if self.state.stage == "train" else None)
        if self._step_flops is not None:
            bus.subscribe(self._step_flops.on_event, steps=False)
        if throughput_unit not in ("samples", "tokens"):
            raise ValueError(f"throughput_unit must be 'samples' or 'tokens', not {throughput_unit!r}")
        self.throughput_unit = throughput_unit
        for phase in (self.train_phase, self.valid_phase):
            phase.count_tokens = throughput_unit == "tokens"
        self.move_batches = self.device.type != "cpu"
        self.non_blocking = self.device.type == "cuda"
        self.state = state = TrainState(epochs=epochs)
        self.bus.state = state
        self._ckpt_step_due = False
        self._epoch_batches = 0
        # the collaborators, each given what it works on: the precision, what a checkpoint holds
        # (learner_checkpoint.py), the `[watch]` rules and their actions (learner_health.py), the
        # optimizer steps (optimization.py)
        self.amp = Precision(precision, self.device, self.notes)
        self.precision = self.amp.name
        health = Health(Watch.of(watch))
        self.checkpoints = Checkpoints(
            checkpointer=checkpointer, bus=bus, state=state, model=self.raw_model, ema=self.ema,
            optimizers=self.optimizers, schedulers=self.schedulers, amp=self.amp, metric_sets=self.metric_sets,
            early_stopping=early_stopping, health=health, config=config or {},
            world_size=self.world_size, model_path=model_path)
        self.guard = HealthGuard(
            health=health, bus=bus, state=state, interrupter=self.interrupter, strategy=strategy,
            optimizers=self.optimizers, schedulers=self.schedulers, amp=self.amp, checkpoints=self.checkpoints,
            log_every=log_every_n_steps, run_dir=self.run_dir,
            # a CPU loss reads back for free, so every step is judged; elsewhere only logged steps
            check_every_step=self.device.type == "cpu")
        self.optimization = Optimization(
            model=self.raw_model, optimizers=self.optimizers, schedulers=self.schedulers,
            intervals=self.scheduler_intervals, amp=self.amp, state=state, clip_grad_norm=clip_grad_norm,
            accumulation=grad_accumulation, log_every=log_every_n_steps, grad_norm=self._grad_norm, guard=self.guard)
        strategy.bind(self)

    # the model the phases call: DDP's wrapper while training; the plain module in validation, where ranks
    # may run different batch counts and DDP's per-forward buffer broadcast would wait for a peer forever
    @property
    def model(self) -> torch.nn.Module:
        if self.train_model is not None and self.state.stage == "train":
            return self.train_model
        return self._model

    @model.setter
    def model(self, value: torch.nn.Module) -> None:
        self._model = value

    # attributes one collaborator holds, read and set there (one copy: what a user sets takes effect)
    checkpointer = _Held("checkpoints")
    model_path = _Held("checkpoints")
    early_stopping = _Held("checkpoints")
    config = _Held("checkpoints")
    clip_grad_norm = _Held("optimization")
    scaler = _Held("amp")  # float16's gradient scaler (None in other precisions)
    health = _Held("guard")  # the `[watch]` rules' statistics (health.py)

    @property
    def scheduler(self):
        """The default training step's scheduler (the first optimizer's; None: none)."""
        return self.optimization.scheduler

    @property
    def scheduler_interval(self) -> str:
        return self.optimization.scheduler_interval

    # --- what a step calls: precision, backward, optimizer steps (Optimization) ---------------

    def autocast(self):
        """The context a forward runs in (the precision's autocast; a strategy's gradient sync first)."""
        if self.before_micro_batch is not None:  # a strategy's gradient sync for this micro-batch
            self.before_micro_batch(self)
        return self.amp.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        self.amp.backward(loss)

    def optimizer_step(self) -> bool | None:
        """Clip, step, zero the gradients, step a per-step scheduler. False: a `[watch]` rule judged the
        gradients and the update was not applied."""
        return self.optimization.optimizer_step()

    def step_optimizer(self, name: str | None = None) -> None:
        """For a phase with its own step: clip, step and zero one optimizer, then its step-interval
        scheduler. `name` is the optimizer's name in the config (`[optimizer.NAME]`); None: the only one."""
        self.optimization.step_optimizer(name, self.phase)

    def zero_grad(self, name: str | None = None) -> None:
        """Clear the gradients of one optimizer's parameters (all optimizers when `name` is None)."""
        self.optimization.zero_grad(name)

    def end_manual_step(self) -> None:
        """After a phase's own step: the gradient scaler's update, once for every optimizer stepped."""
        self.optimization.end_manual_step()

    def fire(self, point: str, detail: str = "") -> None:
        """Announce a point inside the current step ("loss", "backward_started", "backward_completed",
        "optimizer_stepped" or a name of your own) to the callbacks that take per-step events; costs
        nothing when none does."""
        if self.bus.wants_steps:
            s = self.state
            self.bus.emit_step(StepPoint(point=point, phase=s.phase, epoch=s.epoch, step=s.step + 1, detail=detail))

    def loop_parts(self):
        """(autocast or None, backward, optimizer step or None) for a training loop to bind once per
        epoch: None where the plain form applies (no autocast; `opt.step()` then `zero_grad()` with no
        clipping, scaler or per-step scheduler), so the loop makes no call it does not need. A
        subclass that overrides one of these methods keeps it."""
        cls = type(self)
        amp = self.autocast if (cls.autocast is not Learner.autocast or self.amp.dtype is not None
                                or self.world_size > 1) else None
        plain_backward = cls.backward is Learner.backward and self.amp.scaler is None
        backward = torch.Tensor.backward if plain_backward else self.backward
        plain_step = cls.optimizer_step is Learner.optimizer_step and self.optimization.plain
        return amp, backward, None if plain_step else self.optimizer_step

    # --- checkpoints: what one holds (Checkpoints) and the strategy's part -----------------------

    def state_dict(self) -> dict:
        """Everything an exact resume needs (live references; `checkpoint.snapshot` copies it)."""
        return self.strategy.extra_state(self, self.checkpoints.state_dict())

    def load_state_dict(self, data: dict) -> None:
        self.strategy.check_resume(data)
        self.checkpoints.load_state_dict(data)
        self.strategy.after_load(self, data)

    def save_checkpoint(self, reason: str, requested: str = "") -> None:
        """A checkpoint of this state, unless it is saved already (ranks: entered together).
        `requested`: who asked for it ("dashboard", "command", "stop"): that state's checkpoint, this
        one or the one saved already, is kept apart from the run's own (`keep_requested`)."""
        if self.checkpointer is None:
            return
        if requested and self.strategy.writes:
            self.checkpointer.ask(self.state.epoch, self.state.step, requested)
        if self.checkpoints.saved_now():
            return
        if self.strategy.save_checkpoint(self, reason):  # ranks: written (or joined) by the strategy
            return
        self.checkpoints.save(reason, self.state_dict)

    # --- per-step hooks called by phases -------------------------------------------------------

    def log_step(self, metrics: MetricSet, split: str, state: TrainState, batch: int, total: int) -> None:
        if not self.strategy.solo_boundaries:  # a finished write's events go out here, not at a boundary
            self.checkpoints.flush_events()
        values = metrics.read_window()
        if split == "train":
            self.guard.judge_logged(values, state)  # data_wait; a non-finite mean the steps did not judge
        state.last_logged = values
        self.bus.emit(MetricsLogged(split=split, epoch=state.epoch, step=state.step, metrics=values,
                                    scope="step", batch=batch, batches=total))

    def after_step(self, metrics: MetricSet, split: str, state: TrainState, batch: int, total: int,
                   last: tuple | None = None) -> bool:
        """What happens after every optimizer step, in every training loop (the plain fast path too):
        the metrics logged every `log_every_n_steps`, a step checkpoint marked due, the step boundary
        visited when anything waits there (a control request, a due checkpoint or validation, a finished
        write's events), and `max_steps`. `last`: (loss, output, target, items) when the loop has not
        kept a StepOutput. True: training ends here (max_steps)."""
        step = state.step
        ckpt = self.checkpoints.checkpointer  # (not the `checkpointer` property: this runs every step)
        if step % self.log_every_n_steps == 0:
            if last is not None:
                state.last = StepOutput(*last)
            self.log_step(metrics, split, state, batch, total)
        if ckpt is not None:
            every = ckpt.every_n_steps
            if every and step % every == 0:
                self._ckpt_step_due = True
            # ranks enter boundaries together: never for one rank's finished write (see log_step)
            events = self.strategy.solo_boundaries and ckpt.has_events
        else:
            events = False
        if self.interrupter.pending or self._ckpt_step_due or events:
            if last is not None:
                state.last = StepOutput(*last)
            self.at_boundary(state)
        if self.max_steps and step >= self.max_steps:
            state.stop_reason = "max_steps"
            return True
        return False

    def at_boundary(self, state: TrainState) -> None:
        """Apply control requests and due checkpoints; raises CancelFitting on a stop."""
        it = self.interrupter
        it.sync()  # ranks: every one holds the same flags from here (one process: nothing)
        if it.failure:
            self._write_failed()
        if self._valid_due and not self._validating:
            self._valid_due = False
            self._validate_mid_epoch(state)
        self.checkpoints.flush_events()
        for command, source, detail in it.take_log():
            self.bus.emit(ControlReceived(command=command, source=source, detail=detail))
        if self._ckpt_step_due and not self._validating and not (
                state.stage == "train" and state.batch == self._epoch_batches):
            self._ckpt_step_due = False  # at an epoch's last step it waits for the epoch's end: one file
            self.save_checkpoint("step")
        by = it.take_checkpoint_by()
        if by:
            self.save_checkpoint("request", by)
        if it.paused and not it.stop_requested:
            t0 = time.monotonic()
            self.bus.emit(RunPaused(epoch=state.epoch, step=state.step))
            while it.paused and not it.stop_requested and not it.failure:
                it.wait_while_paused(0.1)
                self.bus.tick()  # the control folder's poll, among others: a resume comes that way
                for command, source, detail in it.take_log():
                    self.bus.emit(ControlReceived(command=command, source=source, detail=detail))
                by = it.take_checkpoint_by()
                if by:
                    self.save_checkpoint("request", by)
                self.checkpoints.flush_events()
            paused_for = time.monotonic() - t0
            for ms in self.metric_sets.values():
                ms.pause_clock(paused_for)
            self.bus.emit(RunResumed(epoch=state.epoch, step=state.step, paused_for=paused_for))
        for command, source, detail in it.take_log():
            self.bus.emit(ControlReceived(command=command, source=source, detail=detail))
        it.settle()
        if it.failure:
            self._write_failed()
        if it.stop_requested:
            raise CancelFitting(it.stop_reason)

    def _count_step(self, *_) -> None:
        """The optimizer stepped (its post-hook): a validation is due every N steps."""
        s = self.state
        if s.stage == "train" and not self._validating and (s.step + 1) % self.validate_every_n_steps == 0:
            self._valid_due = True
            self.interrupter.visit()  # the loop comes by its step boundary, where it runs

    def _validate(self, state: TrainState) -> None:
        """One validation now (the averaged weights with EMA), recorded as the epoch's valid metrics."""
        with self.ema.swapped_in() if self.ema is not None else contextlib.nullcontext():
            res = self.valid_phase.run(self, self._valid_loader, state)
        self._record(self.valid_phase.split, res)
        state.valid_at = state.step

    def _validate_mid_epoch(self, state: TrainState) -> None:
        """`validate_every_n_steps`: validate inside the training phase, which then goes on as if
        nothing happened (its RNG, its phase); early stopping and "best" checkpoints follow."""
        if self._valid_loader is None:
            return
        rng, phase, name = rng_state(), self.phase, state.phase
        self._validating = True
        try:
            self._validate(state)
        finally:
            self._validating = False
            set_rng_state(rng)
            self.phase, state.phase = phase, name
            self.model.train(True)
        if phase is not None:  # the progress shown is training's again
            self.bus.emit(PhaseStarted(phase=phase.name, split=phase.split, epoch=state.epoch, step=state.step,
                                       batches=self._epoch_batches))
        if self.early_stopping is not None and self.early_stopping.update(state.epoch_metrics, state.epoch):
            self.bus.emit(OutputPrinted(text=self.early_stopping.message, stream="tuitrain"))
            raise CancelFitting("early_stopping")

    def _write_failed(self) -> None:
        """A sink could not write the run directory: raise RunDirUnwritable with its line."""
        line, tb = self.bus.write_failure or (self.interrupter.failure, "")
        raise RunDirUnwritable(line, tb)

    # --- the run -------------------------------------------------------------------------------

    def _loader(self, data, shuffle: bool) -> ResumableLoader | None:
        return build_loader(data, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers,
                            seed=self.seed if self.seed is not None else 0)

    def fit(self, train_data, valid_data=None, resume: str | os.PathLike | dict | None = None,
            resumed_from: str | os.PathLike | None = None) -> FitResult:
        """Train; returns a FitResult (never raises for errors in user code: status "failed").

        `resume` is a checkpoint path or an already loaded checkpoint dict."""
        ctx = capture_output(self.bus.emit) if self.capture_output else contextlib.nullcontext()
        with ctx:
            return self._fit(train_data, valid_data, resume, resumed_from)

    def _fit(self, train_data, valid_data, resume, resumed_from) -> FitResult:
        t_start = time.monotonic()
        s = self.state
        try:
            if self.seed is not None:
                seed_everything(self.seed)
            train, valid = self.strategy.loaders(self, self._loader(train_data, self.shuffle),
                                                 self._loader(valid_data, False))
            self._valid_loader = valid
            if valid is not None and self.limit_valid_batches:
                valid.limit = self.limit_valid_batches
            stretched, why = [], ""
            if resume is not None:  # loaded before prepare(), which tidies the checkpoint folder
                data = resume if isinstance(resume, dict) else ckpt.load_checkpoint(resume)
                resumed_from = resumed_from or ("" if isinstance(resume, dict) else resume)
                self.load_state_dict(data)
                stretched = self.checkpoints.stretched
                why = self.length_change(data.get("config") or {}) if stretched and self.length_change else ""
            self.checkpoints.follow(train)  # (a resumed position restored)
            if self.checkpointer is not None and self.strategy.writes:  # tidies the folder: one writer
                self.checkpointer.prepare()
            self.batch_size = train.batch_size or self.batch_size  # a DataLoader given brings its own
            batches = train.batches_per_epoch()
            steps_per_epoch = -(-batches // self.grad_accumulation) if batches else 0
            if s.stage == "done":
                s.epoch, s.batch, s.stage = s.epoch + 1, 0, "train"
            self.bus.emit(RunStarted(
                run_dir=str(self.run_dir or ""), experiment=self.experiment, epochs=self.epochs,
                max_steps=self.max_steps, steps_per_epoch=steps_per_epoch, batch_size=train.batch_size,
                start_epoch=s.epoch, start_step=s.step, resumed_from=str(resumed_from or ""), pid=os.getpid(),
                env={**env_info(self.device), **self.env_extra}, config=self.config))
            for note in self.notes:
                self.bus.emit(OutputPrinted(text=note, stream="tuitrain"))
            if stretched:
                self.bus.emit(OutputPrinted(text=say_stretched(stretched, self.scheduler_intervals, why),
                                            stream="tuitrain"))
            # what exists now lives as long as the run: the collector stops walking it (unless the
            # program froze the heap itself: its freeze is left alone)
            frozen = self.freeze_gc and gc.isenabled() and gc.get_freeze_count() == 0
            if frozen:  # (no collection first: garbage frozen now is collected after the unfreeze)
                gc.freeze()
            kept = self.keep_freed_memory and heap.keep_freed_memory()
            s.session_start = time.monotonic()
            timer = self._start_clock()
            self.guard.start_watchdog()
            try:
                reason = self._epochs_with_rollbacks(train, valid)
                status, code = "completed", EXIT_OK
            except CancelFitting as stop:
                reason = stop.reason
                # a stop asked for (or time up on the cluster: "preempted") is interrupted; max_time completes
                interrupted = reason in INTERRUPTING
                status, code = ("interrupted", EXIT_INTERRUPTED) if interrupted else ("completed", EXIT_OK)
                if reason == "max_time":
                    self.bus.emit(OutputPrinted(text=f"max_time ({_seconds(self.max_time)}) spent: training "
                                                "stops here, as completed", stream="tuitrain"))
            finally:
                self.guard.stop_watchdog()
                if timer is not None:
                    timer.cancel()
                if frozen:
                    gc.unfreeze()
                if kept:
                    heap.release_freed_memory()
            if self.interrupter.failure:  # the run directory failed as the loop ended: no final writes
                self._write_failed()
            final = "end" if status == "completed" else "stop"
            # a stop someone asked for (q/y, Ctrl+C, SIGTERM, `tuitrain stop`): its checkpoint is theirs
            asked = "stop" if reason == "stopped" and stop_asked_for(self.interrupter.stop_source) else ""
            self.checkpoints.final(final, lambda: self.save_checkpoint(final, asked))
            if not self.strategy.save_model(self):  # model.pt (a sharded model gathers it first, on every rank)
                self.checkpoints.save_model()
            self.bus.deliver()  # the files have the whole run before it is called complete
            if self.interrupter.failure:
                self._write_failed()
        except KeyboardInterrupt:  # a second Ctrl+C: leave now, earlier checkpoints stay valid
            reason, status, code = "killed", "interrupted", EXIT_INTERRUPTED
            self.checkpoints.finish()
        except BaseException as e:  # user code failed: report, keep earlier checkpoints, exit 1
            return self._failed(e, t_start)
        best = self.checkpoints.best()
        summary = summarize(s.history)
        self.bus.emit(RunFinished(status=status, exit_code=code, epoch=s.epoch, step=s.step, reason=reason,
                                  duration=time.monotonic() - t_start, summary=summary, best=best))
        self.bus.close()
        return FitResult(self.raw_model, status, code, reason, summary, best)

    def _start_clock(self):
        """A timer that stops the run when `max_time` is spent (None without a budget)."""
        if not self.max_time:
            return None
        import threading

        left = self.max_time - self.state.time_used
        timer = threading.Timer(max(left, 0.0), self.interrupter.time_up, args=(_seconds(self.max_time),))
        timer.daemon = True
        timer.start()
        return timer

    def time_used(self) -> float:
        """Seconds of training so far, earlier sessions of this run included."""
        return self.state.training_time()

    def _out_of_memory_message(self, e: BaseException) -> str:
        first = (str(e).strip().splitlines() or [""])[0]
        what = f"{type(e).__name__}: {first}" if first else type(e).__name__
        batch, accumulate = (("data.batch_size", "train.grad_accumulation") if self.config.get("data")
                             else ("batch_size=", "grad_accumulation="))
        return (f"out of memory in a {self.state.stage} step with batch size {self.batch_size} on "
                f"{self.device} ({what}); lower {batch}, and raise {accumulate} to keep the same "
                "effective batch")

    def _epochs_with_rollbacks(self, train: ResumableLoader, valid: ResumableLoader | None) -> str:
        """`_epochs`, gone back to an earlier checkpoint each time a health rule rolls back."""
        while True:
            try:
                return self._epochs(train, valid)
            except RollBack as rb:
                self.guard.roll_back(rb, train, self.load_state_dict)

    def _epochs(self, train: ResumableLoader, valid: ResumableLoader | None) -> str:
        s = self.state
        self._epoch_batches = train.batches_per_epoch()
        while s.epoch <= self.epochs:
            if self.max_steps and s.step >= self.max_steps:
                return "max_steps"
            e = s.epoch
            t0 = time.monotonic()
            if s.stage == "train":
                # resumed mid-epoch: the epoch began ceil(batches done / accumulation) steps ago
                began = s.step - (-(-s.batch // self.grad_accumulation))
                self.bus.emit(EpochStarted(epoch=e, epochs=self.epochs, step=max(began, 0)))
                if s.batch == 0:
                    s.epoch_metrics = {}
                res = self.train_phase.run(self, train, s, start_batch=s.batch)
                self._record(self.train_phase.split, res)
                s.stage = "valid"
                s.valid_rng = rng_state()
            if s.stage == "valid":
                by_steps = self.validate_every_n_steps > 0
                at_end = e >= self.epochs or (self.max_steps and s.step >= self.max_steps)
                if valid is not None and s.step != s.valid_at and (
                        (not by_steps and e % self.validate_every == 0) or (by_steps and at_end)):
                    self._validate(s)
                s.stage = "done"
                s.valid_rng = None
            for name, sched in self.schedulers.items():
                if self.scheduler_intervals[name] == "epoch":
                    sched.step()
            stop_early = False
            # by steps, early stopping counts each validation once: where it ran (mid-epoch, or here)
            if self.early_stopping is not None and (not self.validate_every_n_steps or s.valid_at == s.step):
                stop_early = self.early_stopping.update(s.epoch_metrics, e)
            self.bus.emit(EpochCompleted(epoch=e, epochs=self.epochs, step=s.step,
                                         metrics=dict(s.epoch_metrics), duration=time.monotonic() - t0))
            every = self.checkpointer.every_n_epochs if self.checkpointer is not None else 0
            last = e >= self.epochs or stop_early or s.stop_reason == "max_steps"  # the final save follows
            if not last and ((every and e % every == 0) or self._ckpt_step_due):
                self.save_checkpoint("epoch" if every and e % every == 0 else "step")
            self._ckpt_step_due = False
            if stop_early:
                self.bus.emit(OutputPrinted(text=self.early_stopping.message, stream="tuitrain"))
                return "early_stopping"
            if s.stop_reason == "max_steps":
                return "max_steps"
            self.at_boundary(s)
            s.epoch, s.batch, s.stage = e + 1, 0, "train"
        s.epoch = min(s.epoch, max(self.epochs, 1))
        s.stage = "done"
        return "epochs"

    def _record(self, split: str, values: dict) -> None:
        s = self.state
        for k, v in values.items():
            key = f"{split}/{k}"
            s.epoch_metrics[key] = v
            s.history.setdefault(key, []).append([s.epoch, v])

    def _failed(self, e: BaseException, t_start: float) -> FitResult:
        s = self.state
        try:
            self.checkpoints.finish()
        except Exception:
            pass
        tb = "".join(traceback.format_exception(e))
        msg = str(e) if isinstance(e, (NonFiniteLoss, HealthFailure)) else f"{type(e).__name__}: {e}"
        cause = ""
        if isinstance(e, RunDirUnwritable):
            msg, tb, cause = e.line, e.traceback_text or tb, "write_failed"
        elif out_of_memory(e):
            msg, cause = self._out_of_memory_message(e), "out_of_memory"
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        summary = summarize(s.history)
        epoch, step = (e.epoch, e.step) if isinstance(e, NonFiniteLoss) else (s.epoch, s.step)
        last = None
        if self.checkpointer is not None:
            try:
                last = self.checkpointer.last_complete()
            except Exception:
                pass
        self.bus.emit(RunFailed(error=msg, traceback=tb, epoch=epoch, step=step,
                                duration=time.monotonic() - t_start, summary=summary, cause=cause,
                                checkpoint=str(last or "")))
        self.bus.close()
        return FitResult(self.raw_model, "failed", EXIT_FAILED, "failed", summary, self.checkpoints.best(), error=msg)
