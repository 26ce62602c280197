"""From a config to a running Learner: the run directory, the sinks, the control watcher, signals.

`prepare_run` does every check that can fail before anything is written (config, theme, resume
checkpoint); `Run.execute` creates nothing until then, builds the user's model and data, trains and
returns the exit code. The CLI and the dashboard drive a `Run`; this module never imports textual.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable

from .config import Config, ConfigError, load_config, resolve_target, validate
from .core.callbacks import EventBus
from .core.control import ControlWatcher, Interrupter
from .core.events import RunFailed, RunStarted


class UsageError(Exception):
    """A bad command line or resume target: exit 2, nothing written."""


def find_runs(root: Path) -> list[Path]:
    """Run directories (with run.json or a checkpoint folder) under `root`, newest name first."""
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and ((p / "run.json").exists() or (p / "checkpoint").is_dir())]
    return sorted(runs, key=lambda p: p.name, reverse=True)


def resolve_resume(spec: str, cfg: Config) -> tuple[Path, Path]:
    """(run_dir, checkpoint file) for `--resume latest|PATH`."""
    from .core.checkpoint import latest_checkpoint

    if spec == "latest":
        root = Path(cfg.experiment.dir) / cfg.experiment.name
        for run in find_runs(root):
            found = latest_checkpoint(run / "checkpoint")
            if found is not None:
                return run, found
        raise UsageError(f"--resume latest: no complete checkpoint in any run under {root}")
    p = Path(spec)
    if p.is_dir():
        folder = p / "checkpoint" if (p / "checkpoint").is_dir() else p
        found = latest_checkpoint(folder)
        if found is None:
            raise UsageError(f"--resume {spec}: no complete checkpoint listed in {folder}/index.json")
        run = folder.parent if folder.name == "checkpoint" else folder
        return run, found
    if p.is_file():
        run = p.parent.parent if p.parent.name == "checkpoint" else p.parent
        return run, p
    raise UsageError(f"--resume {spec}: no such file or run directory")


def new_run_dir(cfg: Config) -> Path:
    root = Path(cfg.experiment.dir) / cfg.experiment.name
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = root / stamp
    n = 1
    while path.exists():
        path = root / f"{stamp}-{n}"
        n += 1
    return path


def prepare_run(config_path: str | os.PathLike, overrides=(), *, run_dir: str | None = None,
                resume: str | None = None, headless: bool = True, theme: str | None = None) -> "Run":
    """Every check that can fail before training; raises ConfigError/UsageError (exit 2)."""
    overrides = list(overrides)
    if theme:
        from .themes import available_themes, find_theme

        if find_theme(theme, Path.cwd()) is None:
            raise ConfigError(f"unknown theme {theme!r}; available: {', '.join(available_themes())}, or a path "
                              "to a .tcss file", file="--theme")
        overrides.append(f"dashboard.theme={Path(theme).resolve() if theme.endswith('.tcss') else theme}")
    cfg = load_config(config_path, overrides)
    validate(cfg)
    if cfg.train.compile:
        import torch

        if not hasattr(torch, "compile") or not torch._dynamo.is_dynamo_supported():
            raise ConfigError(f"torch.compile is not supported with Python {sys.version.split()[0]} and torch "
                              f"{torch.__version__} on this platform; set compile = false", file=cfg.source,
                              key="train.compile")
    try:  # a device this machine does not have is a config error, found before anything is written
        from .core.learner import resolve_device

        resolve_device(cfg.train.device)
    except RuntimeError as e:
        raise ConfigError(str(e), file=cfg.source, key="train.device") from None
    if cfg.train.strategy != "single" or os.environ.get("WORLD_SIZE"):
        from .core.strategies import check_config

        check_config(cfg)
    if cfg.log.tensorboard:
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("tensorboard is not installed: pip install 'tuitrain[tensorboard]'",
                              file=cfg.source, key="log.tensorboard")
    if cfg.checkpoint.init_from:
        from .core.checkpoint import CheckpointError, check_weights_file

        try:
            check_weights_file(cfg.checkpoint.init_from)
        except CheckpointError as e:
            raise ConfigError(str(e), file=cfg.source, key="checkpoint.init_from") from None
    ckpt_data = None
    ckpt_path = None
    if resume:
        from .core.checkpoint import CheckpointError, load_checkpoint

        rdir, ckpt_path = resolve_resume(resume, cfg)
        from .sinks.run_status import live_status

        if live_status(rdir) == "running":
            raise UsageError(f"--resume {resume}: the run in {rdir} is still live; stop it first "
                             f"(tuitrain stop {rdir})")
        try:
            ckpt_data = load_checkpoint(ckpt_path)
        except CheckpointError as e:
            raise UsageError(str(e)) from None
        if run_dir and Path(run_dir).resolve() != rdir.resolve():
            raise UsageError("--run-dir and --resume name different run directories; a resumed run "
                             f"continues in {rdir}")
        path = rdir
    else:
        from .core.strategies import quiet_rank

        path = Path(run_dir) if run_dir else new_run_dir(cfg)
        if path.exists() and any(path.iterdir()) and not quiet_rank():  # rank 0 may have made it already
            raise UsageError(f"--run-dir {path}: folder exists and is not empty (use --resume {path} to continue it)")
    return Run(cfg, path, headless=headless, resume_data=ckpt_data, resume_path=ckpt_path)


class Run:
    """One training run in one run directory; `execute()` trains and returns the exit code."""

    def __init__(self, cfg: Config, run_dir: Path, *, headless: bool = True, resume_data: dict | None = None,
                 resume_path: Path | None = None) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.headless = headless
        self.resume_data = resume_data
        self.resume_path = resume_path
        self.interrupter = Interrupter()
        self._callbacks: list[tuple[Callable, bool | None]] = []
        self._sigint_count = 0
        self.result = None
        self.dist = None  # a rank of a distributed run: its DistContext (core/strategies/ddp.py)

    def subscribe(self, callback: Callable, steps: bool | None = None) -> None:
        self._callbacks.append((callback, steps))

    # --- signals (main thread only) ------------------------------------------------------------

    def install_signal_handlers(self, sigint: bool = True) -> None:
        def on_term(signum, frame):
            self.interrupter.request_stop("signal", signal.Signals(signum).name)

        def on_int(signum, frame):
            self._sigint_count += 1
            if self._sigint_count > 1:
                raise KeyboardInterrupt
            self.interrupter.request_stop("signal", "SIGINT")

        signal.signal(signal.SIGTERM, on_term)
        if sigint:
            signal.signal(signal.SIGINT, on_int)

    # --- building ------------------------------------------------------------------------------

    def build(self, bus: EventBus):
        """The user's model, data, loss, optimizer, scheduler, metrics: a Learner and its data."""
        import torch

        from .core import checkpoint as ckpt
        from .core.data import build_loader, seed_everything
        from .core.early_stopping import EarlyStopping
        from .core.learner import Learner
        from .core.metrics import TorchMetric

        cfg = self.cfg
        if not self.headless and "OMP_NUM_THREADS" not in os.environ and (os.cpu_count() or 1) > 1:
            # leave the dashboard a core: OpenMP workers spin-wait and stall when the UI takes one
            torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) - 1)))
        seed_everything(cfg.experiment.seed)
        target = lambda spec, key: resolve_target(spec, cfg.base_dir, key, file=cfg.source)  # noqa: E731
        from .config import _parts

        models = {}
        for key, m in _parts(cfg.model, "model"):
            models[key.partition(".")[2] or "model"] = built = target(m.target, f"{key}.target")(**m.kwargs)
            if not isinstance(built, torch.nn.Module):
                raise TypeError(f"{key}.target {m.target} returned {type(built).__name__}, not a torch.nn.Module")
        # one model is passed as itself; several as a dict the Learner keeps as learner.models
        model = models if cfg.model.named else models["model"]
        data = target(cfg.data.target, "data.target")(**cfg.data.kwargs)
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise TypeError(f"data.target {cfg.data.target} must return (train, valid); got {type(data).__name__}")
        train, valid = data
        if cfg.checkpoint.init_from:  # several models: keys "generator.net.0.weight", as in model.pt
            ckpt.load_weights(model if not cfg.model.named else torch.nn.ModuleDict(models),
                              cfg.checkpoint.init_from, strict=cfg.checkpoint.strict,
                              revise_keys=cfg.checkpoint.revise_keys)
        loss_fn = target(cfg.loss.target, "loss.target")(**cfg.loss.kwargs)
        # [optimizer.NAME] optimizes model NAME; one [optimizer] table gives every model its own optimizer
        opt_tables = dict(cfg.optimizer.named) or dict.fromkeys(models, cfg.optimizer)
        optimizers, notes = {}, []
        world = self.dist.world_size if self.dist is not None else 1
        for name, o in opt_tables.items():
            key = f"optimizer.{name}" if cfg.optimizer.named else "optimizer"
            opt_cls = target(o.target, f"{key}.target") if o.target else getattr(torch.optim, o.name)
            kwargs = dict(o.kwargs)
            if o.base_batch_size:
                note = auto_scale_lr(opt_cls, kwargs, key, o.base_batch_size,
                                     cfg.data.batch_size * cfg.train.grad_accumulation * world)
                notes.append(note)
            optimizers[name] = opt_cls(models[name].parameters(), **kwargs)
        if cfg.train.compile:
            for m in models.values():  # in place: the state_dict keeps its keys, checkpoints stay portable
                m.compile(mode=cfg.train.compile_mode)
            notes.append(f"torch.compile (mode {cfg.train.compile_mode!r}): the first steps include compiling")
        optimizer = optimizers if cfg.model.named else optimizers["model"]
        d = cfg.data
        train_loader = build_loader(train, batch_size=d.batch_size, shuffle=d.shuffle, num_workers=d.num_workers,
                                    seed=cfg.experiment.seed, drop_last=d.drop_last, pin_memory=d.pin_memory)
        valid_loader = build_loader(valid, batch_size=d.batch_size, shuffle=False, num_workers=d.num_workers,
                                    seed=cfg.experiment.seed, pin_memory=d.pin_memory)
        if self.dist is not None:  # this rank's share of the data, before steps per epoch are counted
            self.dist.shard(train_loader, "train")
            self.dist.shard(valid_loader, "valid")
        batches = train_loader.batches_per_epoch()
        steps_per_epoch = -(-batches // cfg.train.grad_accumulation) if batches else 0
        schedulers, intervals = {}, {}
        if cfg.scheduler is not None:  # [scheduler.NAME] drives optimizer NAME; one [scheduler]: every one
            sched_tables = dict(cfg.scheduler.named) or dict.fromkeys(optimizers, cfg.scheduler)
            for name, s in sched_tables.items():
                key = f"scheduler.{name}" if cfg.scheduler.named else "scheduler"
                if s.chain:
                    schedulers[name] = chain_scheduler(optimizers[name], s, key, target, cfg.train.epochs,
                                                       steps_per_epoch, cfg.train.max_steps)
                    intervals[name] = s.interval
                    continue
                cls = target(s.target, f"{key}.target") if s.target else getattr(torch.optim.lr_scheduler, s.name)
                kwargs = fill_scheduler_kwargs(cls, dict(s.kwargs), s.interval, cfg.train.epochs, steps_per_epoch,
                                               cfg.train.max_steps)
                schedulers[name], intervals[name] = cls(optimizers[name], **kwargs), s.interval
        scheduler = schedulers if cfg.model.named else schedulers.get("model")
        phases = {}
        for key in ("phase", "valid_phase"):
            if spec := getattr(cfg.train, key):
                phases[key] = target(spec, f"train.{key}")()

        def metrics(items):
            out = []
            for item in items:
                if isinstance(item, dict):
                    kwargs = {k: v for k, v in item.items() if k not in ("target", "name")}
                    obj = target(item["target"], "metrics")(**kwargs)
                    out.append(TorchMetric(obj, item.get("name") or item["target"].rsplit(":", 1)[-1]))
                else:
                    out.append(item)
            return out

        c = cfg.checkpoint
        checkpointer = ckpt.Checkpointer(self.run_dir / "checkpoint", keep_last=c.keep_last, keep_best=c.keep_best,
                                         monitor=c.monitor, mode=c.mode, every_n_epochs=c.every_n_epochs,
                                         every_n_steps=c.every_n_steps)
        es = cfg.early_stopping
        early = EarlyStopping(es.monitor, es.mode, es.patience, es.min_delta) if es is not None else None
        t = cfg.train
        learner = (Learner if self.dist is None else self.dist.learner)(
            model, optimizer, loss_fn=loss_fn, scheduler=scheduler,
            scheduler_interval=intervals if cfg.model.named else intervals.get("model", "step"),
            train_phase=phases.get("phase"), valid_phase=phases.get("valid_phase"),
            train_metrics=metrics(cfg.metrics.train), valid_metrics=metrics(cfg.metrics.valid),
            epochs=t.epochs, max_steps=t.max_steps, grad_accumulation=t.grad_accumulation,
            clip_grad_norm=t.clip_grad_norm, precision=t.precision, device=t.device,
            validate_every=t.validate_every, log_every_n_steps=cfg.log.every_n_steps, seed=cfg.experiment.seed,
            interrupter=self.interrupter, checkpointer=checkpointer, early_stopping=early,
            capture_output=True, config=cfg.to_dict(), experiment=cfg.experiment.name, bus=bus,
            run_dir=self.run_dir, env=git_info(cfg.base_dir), notes=notes)
        return learner, train_loader, valid_loader

    # --- running -------------------------------------------------------------------------------

    def _attach(self, bus: EventBus) -> list:
        from .core.devices import DeviceMonitor
        from .sinks.standard import standard_sinks

        for sink in standard_sinks(self.run_dir, tensorboard=self.cfg.log.tensorboard):
            bus.subscribe(sink, steps=False)
        if self.headless:
            from .sinks.console import HeadlessConsole

            bus.subscribe(HeadlessConsole(), steps=False)
        for cb, steps in self._callbacks:
            bus.subscribe(cb, steps)
        monitor = DeviceMonitor(bus.emit)

        def start_monitor(event, state):  # after RunStarted, so that the stream opens with it
            if isinstance(event, RunStarted):  # start() is idempotent
                monitor.start()

        bus.subscribe(start_monitor, steps=False)
        return [monitor]

    def execute(self) -> int:
        """Train; returns 0, 1 or 130. Errors in user code become a RunFailed event, never a raise."""
        from .core.fsutil import atomic_write_text
        from .core.strategies import distributed_wanted

        if self.dist is None and distributed_wanted(self.cfg):
            from .core.strategies.launch import execute_distributed

            return execute_distributed(self)

        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.run_dir / "config.toml", self.cfg.to_toml())
        watcher = ControlWatcher(self.run_dir, self.interrupter).start()
        bus = EventBus()
        threads: list = []
        try:
            threads = self._attach(bus)
            try:
                learner, train, valid = self.build(bus)
            except Exception as e:  # the user's constructors failed: a failed run, with its traceback
                self._build_failed(bus, e)
                return 1
            result = learner.fit(train, valid, resume=self.resume_data, resumed_from=self.resume_path)
            self.result = result
            return result.exit_code
        finally:
            for t in threads:
                t.close()
            watcher.close()
            bus.close()

    def _build_failed(self, bus: EventBus, e: BaseException) -> None:
        cfg = self.cfg
        bus.emit(RunStarted(run_dir=str(self.run_dir), experiment=cfg.experiment.name, epochs=cfg.train.epochs,
                            max_steps=cfg.train.max_steps, steps_per_epoch=0, batch_size=cfg.data.batch_size,
                            pid=os.getpid(), config=cfg.to_dict()))
        bus.emit(RunFailed(error=f"{type(e).__name__}: {e}", traceback="".join(traceback.format_exception(e)),
                           epoch=0, step=0))


def auto_scale_lr(opt_cls, kwargs: dict, key: str, base: int, effective: int) -> str:
    """Scale `lr` in `kwargs` linearly with the effective batch; returns the line that says so."""
    lr = kwargs.get("lr")
    if lr is None:
        try:
            lr = inspect.signature(opt_cls).parameters["lr"].default
        except (KeyError, TypeError, ValueError):
            lr = inspect.Parameter.empty
        if not isinstance(lr, (int, float)):
            raise ValueError(f"{key}.base_batch_size: {opt_cls.__name__} has no default lr; set {key}.lr")
    kwargs["lr"] = lr * effective / base
    return (f"auto_scale_lr: {key}.lr {lr:g} -> {kwargs['lr']:g} (effective batch {effective} = batch_size x "
            f"grad_accumulation x processes, base_batch_size {base})")


def git_info(folder: Path) -> dict:
    """The git commit of the config's folder, when it is in a repository: {"git_commit", "git_dirty"}."""
    import subprocess

    try:
        commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5)
        if commit.returncode != 0:
            return {}
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return {"git_commit": commit.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {}


def chain_scheduler(optimizer, sched, key: str, target, epochs: int, steps_per_epoch: int, max_steps: int):
    """Windows one after another (a warm-up, then cosine): torch's SequentialLR, each window's
    T_max / total_iters / total_steps filled with its length when left out."""
    import torch

    from .config import chain_parts

    total = epochs * steps_per_epoch
    if max_steps:
        total = min(total, max_steps) if total else max_steps
    horizon = total if sched.interval == "step" else epochs
    parts, begins = [], []
    for part_key, part, begin, end in chain_parts(sched, key):
        cls = target(part.target, f"{part_key}.target") if part.target else getattr(torch.optim.lr_scheduler, part.name)
        span = max(1, (end if end is not None else horizon) - begin)
        kwargs = dict(part.kwargs)
        try:
            params = inspect.signature(cls).parameters
        except (TypeError, ValueError):
            params = {}
        for name in ("T_max", "total_iters", "total_steps"):
            if name in params and name not in kwargs:
                kwargs[name] = span
        parts.append(cls(optimizer, **kwargs))
        begins.append(begin)
    if len(parts) == 1:
        return parts[0]
    return torch.optim.lr_scheduler.SequentialLR(optimizer, parts, milestones=begins[1:])


def fill_scheduler_kwargs(cls, kwargs: dict, interval: str, epochs: int, steps_per_epoch: int,
                          max_steps: int) -> dict:
    """Fill total_steps / T_max / epochs+steps_per_epoch when the class needs them and they are left out."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return kwargs
    total_steps = epochs * steps_per_epoch
    if max_steps:
        total_steps = min(total_steps, max_steps) if total_steps else max_steps
    horizon = total_steps if interval == "step" else epochs
    if "total_steps" in params and "total_steps" not in kwargs and not ("epochs" in kwargs and "steps_per_epoch" in kwargs):
        kwargs["total_steps"] = max(1, horizon)
    if "T_max" in params and "T_max" not in kwargs:
        kwargs["T_max"] = max(1, horizon)
    if "total_iters" in params and "total_iters" not in kwargs and params["total_iters"].default is inspect.Parameter.empty:
        kwargs["total_iters"] = max(1, horizon)
    return kwargs
