"""The core's Learner (`CoreLearner`): trains a model over epochs and says everything as events.

Everything that leaves it is an event on `learner.bus`; it reads the `Interrupter` flags at step
boundaries and never waits on a UI. What writes the events somewhere subscribes to the bus it is given:
the core imports nothing of tuitrain outside `tuitrain.core`, and never textual. `tuitrain.Learner`
(tuitrain/run/learner.py) adds a run directory's standard files, the screen and the signals.

Its settings come as sections, grouped as a config's TOML tables (sections.py: `Experiment`, `Train`,
`Data`, `Metrics`, `Log`, `Checkpointing`; `Watch` in health.py), each checked once as it is made; the
common flat keywords (`epochs=`, `batch_size=` ...: `sections.SHORTCUTS`) still set their fields.
What it does between start and finish is the run's `Lifecycle` (lifecycle.py: control at boundaries,
the summary, the end and its exit code); the loop itself is loop.py (`Loop`, given one fit's `LoopParts`,
loop_parts.py), run inside a `TrainingSession` (session.py); when to save is saving.py's. It owns four
collaborators, each built with what it works on (none holds the Learner): `precision` and
`optimization` (optimization.py), `ckpt_io` (learner_checkpoint.py: what a checkpoint holds, saving and
loading it, model.pt) and `guard` (learner_health.py: the `[watch]` rules acted on, the watchdog).
The methods a step of one's own calls (`backward`, `step_optimizer`, `zero_grad`, `autocast`, `fire`)
and `state_dict`/`load_state_dict`/`save_checkpoint` stay here and hand over to them.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from pathlib import Path
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from . import checkpoint as ckpt
from . import flops
from .callbacks import Callback, EventBus
from .control import Interrupter
from .data import build_loaders, seed_everything
from .early_stopping import EarlyStopping
from .environment import env_info, resolve_device
from .ema import WeightAverage
from .events import OutputPrinted, RunStarted, StepPoint
from .health import Health, Watch
from .learner_checkpoint import CheckpointIO
from .learner_health import HealthGuard
from .lifecycle import Lifecycle, Summary, out_of_memory
from .loop import Loop
from .loop_parts import LoopParts, StepCalls
from .learner_media import close_media, open_media
from .media import LearnerMedia, MediaLog, QuietMedia
from .metrics import MetricSet
from .optimization import Optimization, Precision
from .output import capture_output
from .phases import Phase, TrainPhase, ValidPhase
from .schedules import say as say_stretched
from .sections import Checkpointing, Data, Experiment, Log, Metrics, Train, with_shortcuts
from .saving import End, Request, SavePolicy
from .session import TrainingSession, max_time_spent, out_of_memory_advice
from .state import EXIT_FAILED, CancelFitting, FitResult, NonFiniteLoss, RunDirUnwritable, TrainState
from .strategies.base import Strategy

if TYPE_CHECKING:
    from .data import ResumableLoader

#: what `fit(resume=...)` takes: a checkpoint's path or a checkpoint already loaded
Resume = str | os.PathLike[str] | dict[str, Any] | None


class CoreLearner:
    """Trains `model` with `optimizer`; `fit(train, valid)` returns a FitResult.

    `train`/`valid` may be Datasets (loaders are built as `data` says) or DataLoaders. Metrics
    (`metrics=Metrics(train=[...], valid=[...])`, or `train_metrics=`) are names ("loss", "accuracy",
    "top5_accuracy", "lr", "throughput", "step_time", "tflops", "mfu", "max_memory", ...), `Metric`
    objects or torchmetrics metrics.

    Several models: `model`, `optimizer` (and `scheduler`) are dicts keyed by name ({"generator": G,
    "discriminator": D}), read as `learner.models[name]` and `learner.optimizers[name]` by a
    `CustomTrainPhase`; one model is `learner.model`, also `learner.models["model"]`.
    """

    #: `gc.freeze()` what exists when training starts (the model, the data, every imported module),
    #: unfrozen when it ends: the collector's full passes, which walked those hundreds of thousands
    #: of objects (50-80 ms each, a few per run, some in the middle of a checkpoint), skip them
    freeze_gc = True
    #: keep memory freed by one step in the process for the next (glibc's trim and mmap thresholds
    #: raised, see `tuitrain.core.heap`), and give it back when training ends: a step's large blocks
    #: otherwise return to the kernel and come back page fault by page fault
    keep_freed_memory = True

    def __init__(
        self,
        model: torch.nn.Module | dict[str, torch.nn.Module],
        optimizer: torch.optim.Optimizer | dict[str, torch.optim.Optimizer],
        *,
        loss_fn: Callable[..., Any] | None = None,
        scheduler: Any = None,
        experiment: Experiment | str | None = None,
        train: Train | None = None,
        data: Data | None = None,
        metrics: Metrics | None = None,
        log: Log | None = None,
        checkpoint: Checkpointing | ckpt.Checkpointer | None = None,
        watch: Watch | dict[str, Any] | None = None,
        early_stopping: EarlyStopping | None = None,
        train_phase: Phase | None = None,
        valid_phase: Phase | None = None,
        callbacks: Iterable[Callback] = (),
        bus: EventBus | None = None,
        interrupter: Interrupter | None = None,
        strategy: Strategy | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        **shortcuts: Any,
    ) -> None:
        if isinstance(experiment, str):
            experiment = Experiment(name=experiment)
        checkpointer = checkpoint if isinstance(checkpoint, ckpt.Checkpointer) else None
        got = with_shortcuts(
            {
                "experiment": experiment,
                "train": train,
                "data": data,
                "metrics": metrics,
                "log": log,
                "checkpoint": None if checkpointer is not None else checkpoint,
            },
            shortcuts,
        )
        exp, t, d, m, lg, c = (got[k] for k in ("experiment", "train", "data", "metrics", "log", "checkpoint"))
        self.sections = got  #: the settings this learner was built with, by section
        #: how this process trains among others (one process, a DDP or FSDP rank): strategies/base.py
        self.strategy = strategy = strategy if strategy is not None else Strategy()
        self.world_size = strategy.world_size
        device = strategy.device if strategy.device is not None else t.device
        # each rank its own random stream (dropout, augmentation)
        self.seed = exp.seed + strategy.rank if exp.seed is not None else None
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
        every = t.scheduler_interval
        self.scheduler_intervals = {
            k: every.get(k, "step") if isinstance(every, dict) else every for k in self.schedulers
        }
        self.epochs, self.max_steps, self.grad_accumulation = t.epochs, t.max_steps, t.grad_accumulation
        #: seconds of training (over every resume) after which the run stops as completed; 0: none
        self.max_time = t.seconds()
        self.validate_every, self.validate_every_n_steps = t.validate_every, t.validate_every_n_steps
        self.limit_valid_batches = t.limit_valid_batches  # > 0: at most this many validation batches
        self.log_every_n_steps = lg.every_n_steps
        self.data = d
        self.batch_size = d.batch_size
        self.interrupter = strategy.interrupter(interrupter or Interrupter(), lambda: self.state.stage)
        self.train_phase = train_phase or TrainPhase()
        self.valid_phase = valid_phase or ValidPhase()
        if len(self.models) > 1 and type(self.train_phase).step is Phase.step:
            raise ValueError(
                f"several models ({', '.join(self.models)}) need a training phase with its own "
                'step: subclass CustomTrainPhase ([train] phase = "module:Class")'
            )
        self.capture_output = lg.capture_output
        self.log_settings = lg
        #: the run's images, texts and histograms (core/media.py), during a fit; `media_chores`: what
        #: `[log] samples` and `histograms` ask of the loop (None: nothing)
        self.media: MediaLog | QuietMedia | None = None
        self.media_chores: LearnerMedia | None = None
        self.experiment = exp.name
        self.env_extra = dict(exp.env)  # added to RunStarted.env (the runner's git commit, ...)
        self.notes = list(exp.notes)  # said in the log right after RunStarted
        #: given the config a checkpoint holds, why this run's length differs from that run's ("train.epochs
        #: changed 3 -> 5"), said with the schedules a resume stretched to this run's length (None: not said)
        self.length_change: Callable[[dict[str, Any]], str] | None = None
        self.run_dir = Path(run_dir) if run_dir is not None else None
        model_path = Path(c.model_path) if c.model_path else None
        if self.run_dir is not None:
            model_path = model_path or self.run_dir / "model.pt"
            if checkpointer is None:
                checkpointer = c.checkpointer(self.run_dir / "checkpoint")
        if not strategy.writes:  # another rank writes the run's files
            model_path = None
        self.bus = bus = bus if bus is not None else EventBus()
        #: an exponential moving average of the weights (`ema_decay` > 0): validated, checkpointed, in model.pt
        self.ema = WeightAverage(self.raw_model, t.ema_decay) if t.ema_decay else None
        if self.ema is not None:
            self.ema.follow(self.optimizers.values())
        #: the loop over epochs (loop.py), and what it keeps between steps
        self.loop = Loop()
        if self.validate_every_n_steps and self.optimizer is not None:
            self.optimizer.register_step_post_hook(self.loop.count_step)
        # a sink that cannot write the run directory (a full disk) ends the run at the next step
        bus.on_write_failure.append(self.interrupter.fail)
        if bus.write_failure is not None:
            self.interrupter.fail(bus.write_failure[0])
        for cb in callbacks:
            bus.subscribe(cb)
        # a name that is not built in is a value the step returns ({"loss": ..., "perplexity": ...});
        # the other named scalars a step returns are logged too, under their own names
        self.metric_sets = {
            "train": MetricSet(m.train, self.optimizer, step_values=True),
            "valid": MetricSet(m.valid, self.optimizer, step_values=True),
        }
        # tflops, mfu, max_memory: the FLOPs of a step (given, or counted on the first batch) and the peak
        self._step_flops = flops.setup(
            self.metric_sets,
            self.device,
            t.flops_per_step,
            t.peak_tflops,
            models=self.models.values(),
            optimizers=self.optimizers.values(),
            batches_per_step=1 if getattr(self.train_phase, "manual_optimization", False) else t.grad_accumulation,
            position=lambda: (self.state.epoch, self.state.batch) if self.state.stage == "train" else None,
        )
        if self._step_flops is not None:
            bus.subscribe(self._step_flops.on_event, steps=False)
        self.throughput_unit = m.throughput_unit
        for phase in (self.train_phase, self.valid_phase):
            phase.count_tokens = m.throughput_unit == "tokens"
        self.move_batches = self.device.type != "cpu"
        self.non_blocking = self.device.type == "cuda"
        self.state = state = TrainState(epochs=t.epochs)
        bus.state = state
        #: the run's life between start and finish (lifecycle.py); a new one each fit
        self.lifecycle: Lifecycle | None = None
        self.early_stopping = early_stopping
        # the collaborators, each given what it works on: the precision, what a checkpoint holds
        # (learner_checkpoint.py), the `[watch]` rules and their actions (learner_health.py), the
        # optimizer steps (optimization.py)
        self.precision = Precision(t.precision, self.device, self.notes)
        health = Health(Watch.of(watch))
        self.ckpt_io = CheckpointIO(
            checkpointer=checkpointer,
            bus=bus,
            state=state,
            model=self.raw_model,
            ema=self.ema,
            optimizers=self.optimizers,
            schedulers=self.schedulers,
            precision=self.precision,
            metric_sets=self.metric_sets,
            early_stopping=early_stopping,
            health=health,
            config=exp.config,
            world_size=self.world_size,
            model_path=model_path,
        )
        self.guard = HealthGuard(
            health=health,
            bus=bus,
            state=state,
            interrupter=self.interrupter,
            strategy=strategy,
            optimizers=self.optimizers,
            schedulers=self.schedulers,
            precision=self.precision,
            ckpt_io=self.ckpt_io,
            log_every=lg.every_n_steps,
            run_dir=self.run_dir,
            # a CPU loss reads back for free, so every step is judged; elsewhere only logged steps
            check_every_step=self.device.type == "cpu",
        )
        self.optimization = Optimization(
            model=self.raw_model,
            optimizers=self.optimizers,
            schedulers=self.schedulers,
            intervals=self.scheduler_intervals,
            precision=self.precision,
            state=state,
            clip_grad_norm=t.clip_grad_norm,
            accumulation=t.grad_accumulation,
            log_every=lg.every_n_steps,
            grad_norm=self.metric_sets["train"].grad_norm,
            guard=self.guard,
        )
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

    @property
    def phase(self) -> Phase | None:
        """The phase running now (set by the loop as it begins)."""
        return self.loop.phase

    @property
    def checkpointer(self) -> ckpt.Checkpointer | None:
        """The run's checkpoint folder and its retention (None: no checkpoints)."""
        return self.ckpt_io.checkpointer

    @property
    def config(self) -> dict[str, Any]:
        """The config recorded in RunStarted and in every checkpoint."""
        return self.ckpt_io.config

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """float16's gradient scaler (None in other precisions)."""
        return self.precision.scaler

    @property
    def health(self) -> Health:
        """The `[watch]` rules' statistics (health.py)."""
        return self.guard.health

    @property
    def scheduler(self) -> Any:
        """The default training step's scheduler (the first optimizer's; None: none)."""
        return self.optimization.scheduler

    @property
    def scheduler_interval(self) -> str:
        return self.optimization.scheduler_interval

    # --- what a step calls: precision, backward, optimizer steps (Optimization) ---------------

    def autocast(self) -> AbstractContextManager[Any]:
        """The context a forward runs in (the precision's autocast; a strategy's gradient sync first)."""
        if self.before_micro_batch is not None:  # a strategy's gradient sync for this micro-batch
            self.before_micro_batch(self)
        return self.precision.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        self.precision.backward(loss)

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

    def step_calls(self) -> StepCalls:
        """(autocast or None, backward, optimizer step or None) for a training loop to bind once per
        epoch: None where the plain form applies (no autocast; `opt.step()` then `zero_grad()` with no
        clipping, scaler or per-step scheduler), so the loop makes no call it does not need. A
        subclass that overrides one of these methods keeps it."""
        cls = type(self)
        amp = (
            self.autocast
            if (cls.autocast is not CoreLearner.autocast or self.precision.dtype is not None or self.world_size > 1)
            else None
        )
        plain_backward = cls.backward is CoreLearner.backward and self.precision.scaler is None
        backward = torch.Tensor.backward if plain_backward else self.backward
        plain_step = cls.optimizer_step is CoreLearner.optimizer_step and self.optimization.plain
        return amp, backward, None if plain_step else self.optimizer_step

    # --- checkpoints: what one holds (Checkpoints) and the strategy's part -----------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs (live references; `checkpoint.snapshot` copies it)."""
        return self.strategy.extra_state(self, self.ckpt_io.state_dict())

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.strategy.check_resume(data)
        self.ckpt_io.load_state_dict(data)
        self.strategy.after_load(self, data)

    def save_checkpoint(self, reason: str, requested: str = "") -> None:
        """A checkpoint of this state, unless it is saved already (ranks: entered together).
        `requested`: who asked for it ("dashboard", "command", "stop"): that state's checkpoint, this
        one or the one saved already, is kept apart from the run's own (`keep_requested`)."""
        if self.checkpointer is None:
            return
        if requested and self.strategy.writes:
            self.checkpointer.ask(self.state.epoch, self.state.step, requested)
        if self.ckpt_io.saved_now():
            return
        if self.strategy.save_checkpoint(self, reason):  # ranks: written (or joined) by the strategy
            return
        self.ckpt_io.save(reason, self.state_dict)

    def _save_requested(self, by: str) -> None:
        """A checkpoint someone asked for (the run's `Lifecycle` hands the request over at a boundary)."""
        save = SavePolicy.of(self.checkpointer).decide(Request(by))
        if save is not None:
            self.save_checkpoint(save.reason, save.requested)

    def write_failed(self) -> None:
        """A sink could not write the run directory: raise RunDirUnwritable with its line."""
        line, tb = self.bus.write_failure or (self.interrupter.failure, "")
        raise RunDirUnwritable(line, tb)

    # --- the run -------------------------------------------------------------------------------

    def fit(
        self,
        train_data: Any,
        valid_data: Any = None,
        resume: Resume = None,
        resumed_from: str | os.PathLike[str] | None = None,
    ) -> FitResult:
        """Train; returns a FitResult (never raises for errors in user code: status "failed").

        `resume` is a checkpoint path or an already loaded checkpoint dict."""
        ctx = capture_output(self.bus.emit) if self.capture_output else contextlib.nullcontext()
        with ctx:
            return self._fit(train_data, valid_data, resume, resumed_from)

    def _pause_chores(self) -> None:
        self.bus.tick()  # the control folder's poll, among others: a resume comes that way
        self.ckpt_io.flush_events()

    def _fit(
        self, train_data: Any, valid_data: Any, resume: Resume, resumed_from: str | os.PathLike[str] | None
    ) -> FitResult:
        s = self.state
        life = self.lifecycle = Lifecycle(
            self.bus, self.interrupter, chores=self._pause_chores, save=self._save_requested
        )
        life.after_pause.extend(ms.pause_clock for ms in self.metric_sets.values())
        try:
            if self.seed is not None:
                seed_everything(self.seed)
            train, valid = self.strategy.loaders(
                self, *build_loaders(train_data, valid_data, self.data, self.seed if self.seed is not None else 0)
            )
            if train is None:
                raise ValueError("fit() was given no training data")
            if valid is not None and self.limit_valid_batches:
                valid.limit = self.limit_valid_batches
            stretched, why = [], ""
            if resume is not None:  # loaded before prepare(), which tidies the checkpoint folder
                data = resume if isinstance(resume, dict) else ckpt.load_checkpoint(resume)
                resumed_from = resumed_from or ("" if isinstance(resume, dict) else resume)
                self.load_state_dict(data)
                stretched = self.ckpt_io.stretched
                why = self.length_change(data.get("config") or {}) if stretched and self.length_change else ""
            self.ckpt_io.follow(train)  # (a resumed position restored)
            if self.checkpointer is not None and self.strategy.writes:  # tidies the folder: one writer
                self.checkpointer.prepare()
            self.batch_size = train.batch_size or self.batch_size  # a DataLoader given brings its own
            batches = train.batches_per_epoch()
            steps_per_epoch = -(-batches // self.grad_accumulation) if batches else 0
            if s.stage == "done":
                s.epoch, s.batch, s.stage = s.epoch + 1, 0, "train"
            self.bus.emit(
                RunStarted(
                    run_dir=str(self.run_dir or ""),
                    experiment=self.experiment,
                    epochs=self.epochs,
                    max_steps=self.max_steps,
                    steps_per_epoch=steps_per_epoch,
                    batch_size=train.batch_size,
                    start_epoch=s.epoch,
                    start_step=s.step,
                    resumed_from=str(resumed_from or ""),
                    pid=os.getpid(),
                    env={**env_info(self.device), **self.env_extra},
                    config=self.config,
                )
            )
            for note in self.notes:
                self.bus.emit(OutputPrinted(text=note, stream="tuitrain"))
            self._start_media()
            if stretched:
                self.bus.emit(
                    OutputPrinted(text=say_stretched(stretched, self.scheduler_intervals, why), stream="tuitrain")
                )
            reason = self._train(train, valid)
            if self.interrupter.failure:  # the run directory failed as the loop ended: no final writes
                self.write_failed()
            final = SavePolicy.of(self.checkpointer).decide(End(reason, self.interrupter.stop_source))
            if final is not None:  # a stop someone asked for (q/y, Ctrl+C, SIGTERM, `tuitrain stop`): theirs
                self.ckpt_io.final(final.reason, lambda: self.save_checkpoint(final.reason, final.requested))
            if not self.strategy.save_model(self):  # model.pt (a sharded model gathers it first, on every rank)
                self.ckpt_io.save_model()
            self._end_media()
            self.bus.deliver()  # the files have the whole run before it is called complete
            if self.interrupter.failure:
                self.write_failed()
        except KeyboardInterrupt:  # a second Ctrl+C: leave now, earlier checkpoints stay valid
            reason = "killed"
            self.ckpt_io.finish()
            self._end_media()
        except BaseException as e:  # user code failed: report, keep earlier checkpoints, exit 1
            return self._failed(e)
        best = self.ckpt_io.best()
        end = life.finished(reason, epoch=s.epoch, step=s.step, summary=Summary.of(s.history).table(), best=best)
        self.bus.close()
        return FitResult(self.raw_model, end.status, end.exit_code, reason, end.summary, best)

    def _start_media(self) -> None:
        self.media, self.media_chores = open_media(self)

    def _end_media(self) -> None:
        """Everything logged is written and said before the run ends."""
        close_media(self.media, self.media_chores)
        self.media_chores = None

    def _media_now(self, what: str) -> MediaLog | QuietMedia:
        if self.media is None:
            raise RuntimeError(f"learner.{what} logs during fit (from a callback or a phase)")
        return self.media

    def log_text(self, name: str, text: str, step: int | None = None) -> None:
        """A text (a generated sample) under `name` at `step` (default: the step now):
        RUN_DIR/media/<name>/<step>.txt and a MediaLogged event, written off the loop's thread."""
        self._media_now("log_text").text(self.state.step if step is None else step, name, text)

    def log_image(self, name: str, images: Any, step: int | None = None) -> None:
        """An image, or a batch as a grid: a tensor (C,H,W) or (N,C,H,W), floats in [0,1] or uint8; numpy
        (H,W) or (H,W,C); a PIL image; a list of them. Copied now, encoded and written off the loop's
        thread (RUN_DIR/media/<name>/<step>.png)."""
        self._media_now("log_image").image(self.state.step if step is None else step, name, images)

    def log_histogram(self, name: str, values: Any, step: int | None = None) -> None:
        """The distribution of `values` (a tensor, or a list of tensors counted together) at `step`: a
        HistogramLogged event; a name keeps the bins of its first call."""
        self._media_now("log_histogram").histogram(self.state.step if step is None else step, name, values)

    def _train(self, train: ResumableLoader, valid: ResumableLoader | None) -> str:
        """The loop (loop.py) over this fit's parts, inside a `TrainingSession` (session.py: the garbage
        collector, the heap, the watchdog and the max_time clock set for it); why it ended."""
        with TrainingSession(
            state=self.state,
            guard=self.guard,
            time_up=self.interrupter.time_up,
            max_time=self.max_time,
            freeze_gc=self.freeze_gc,
            keep_freed_memory=self.keep_freed_memory,
        ):
            try:
                return self.loop.run(LoopParts.of(self), train, valid)
            except CancelFitting as stop:
                if stop.reason == "max_time":
                    self.bus.emit(OutputPrinted(text=max_time_spent(self.max_time), stream="tuitrain"))
                return stop.reason

    def time_used(self) -> float:
        """Seconds of training so far, earlier sessions of this run included."""
        return self.state.training_time()

    def _failed(self, e: BaseException) -> FitResult:
        s = self.state
        with contextlib.suppress(Exception):
            self.ckpt_io.finish()
        with contextlib.suppress(Exception):
            self._end_media()  # what was logged before the failure is kept
        error, tb, cause = e, "", ""
        if out_of_memory(e) and not isinstance(e, RunDirUnwritable):  # what to change, in place of torch's line
            from_config = bool(self.config.get("data"))
            advice = out_of_memory_advice(
                e, stage=s.stage, batch_size=self.batch_size, device=self.device, from_config=from_config
            )
            error, tb, cause = advice, "".join(traceback.format_exception(e)), "out_of_memory"
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        summary = Summary.of(s.history).table()
        epoch, step = (e.epoch, e.step) if isinstance(e, NonFiniteLoss) else (s.epoch, s.step)
        last = None
        if self.checkpointer is not None:
            with contextlib.suppress(Exception):
                last = self.checkpointer.last_complete()
        life = self.lifecycle or Lifecycle(self.bus, self.interrupter)
        end = life.failed(
            error, epoch=epoch, step=step, summary=summary, traceback=tb, cause=cause, checkpoint=str(last or "")
        )
        self.bus.close()
        return FitResult(self.raw_model, "failed", EXIT_FAILED, "failed", summary, self.ckpt_io.best(), error=end.error)
