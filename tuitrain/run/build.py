"""Building a run's parts from its config: the user's models and data, the loss, optimizers (with
auto_scale_lr), schedulers (with windows and filled-in lengths), metrics, phases, and the Learner.

Called by `Run.build` in the training thread or rank. Must not import textual.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import traceback
from pathlib import Path

from tuitrain.config import chain_parts, named_parts, resolve_target
from tuitrain.core.callbacks import EventBus


def build_learner(cfg, run_dir: Path, bus: EventBus, interrupter, *, dist=None, headless: bool = True, notes=()):
    """The user's model, data, loss, optimizer, scheduler, metrics from `cfg`: a CoreLearner writing into
    `run_dir` through `bus`, steered by `interrupter`, and its loaders. `dist`: this rank's DistContext
    (None: one process); `headless`: no dashboard shares this process; `notes`: lines for the run's log.
    Runs in the training thread (or rank); errors here are the user's code failing, except a ConfigError
    (an argument only its callable rejects)."""
    import torch

    from tuitrain.core import checkpoint as ckpt
    from tuitrain.core.data import build_loaders, seed_everything
    from tuitrain.core.early_stopping import EarlyStopping
    from tuitrain.core.learner import CoreLearner
    from tuitrain.core.sections import Experiment
    from tuitrain.core.strategies import strategy_for
    from tuitrain.core.metrics import TorchMetric

    if not headless and "OMP_NUM_THREADS" not in os.environ and (os.cpu_count() or 1) > 1:
        # leave the dashboard a core: OpenMP workers spin-wait and stall when the UI takes one
        torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) - 1)))
    seed_everything(cfg.experiment.seed)
    target = lambda spec, key: resolve_target(spec, cfg.base_dir, key, file=cfg.source)  # noqa: E731
    models = {}
    for key, m in named_parts(cfg.model, "model"):
        models[key.partition(".")[2] or "model"] = built = target(m.target, f"{key}.target")(**m.kwargs)
        if not isinstance(built, torch.nn.Module):
            raise TypeError(f"{key}.target {m.target} returned {type(built).__name__}, not a torch.nn.Module")
    # one model is passed as itself; several as a dict the Learner keeps as learner.models
    model = models if cfg.model.named else models["model"]
    if cfg.checkpoint.init_from:  # several models: keys "generator.net.0.weight", as in model.pt
        ckpt.load_weights(
            model if not cfg.model.named else torch.nn.ModuleDict(models),
            cfg.checkpoint.init_from,
            strict=cfg.checkpoint.strict,
            revise_keys=cfg.checkpoint.revise_keys,
        )
    # the loss and the optimizers before the data, which may take long to build: a value only their
    # constructors reject (lr = -1) ends the run at once, as a config error
    loss_fn = construct(cfg, "loss", cfg.loss.target, target(cfg.loss.target, "loss.target"), **cfg.loss.kwargs)
    strategy = strategy_for(dist)  # one process, or this rank's DDP or FSDP
    strategy.prepare_model(model)  # fsdp shards the parameters in place, before the optimizer takes them
    # [optimizer.NAME] optimizes model NAME; one [optimizer] table gives every model its own optimizer
    opt_tables = dict(cfg.optimizer.named) or dict.fromkeys(models, cfg.optimizer)
    optimizers, notes = {}, list(notes)
    world = dist.world_size if dist is not None else 1
    for name, o in opt_tables.items():
        key = f"optimizer.{name}" if cfg.optimizer.named else "optimizer"
        opt_cls = target(o.target, f"{key}.target") if o.target else getattr(torch.optim, o.name)
        kwargs = dict(o.kwargs)
        if o.base_batch_size:
            note = auto_scale_lr(
                opt_cls, kwargs, key, o.base_batch_size, cfg.data.batch_size * cfg.train.grad_accumulation * world
            )
            notes.append(note)
        optimizers[name] = build_optimizer(opt_cls, models[name], kwargs, o, key, cfg)
    if cfg.train.compile:
        for m in models.values():  # in place: the state_dict keeps its keys, checkpoints stay portable
            m.compile(mode=cfg.train.compile_mode)
        notes.append(f"torch.compile (mode {cfg.train.compile_mode!r}): the first steps include compiling")
    optimizer = optimizers if cfg.model.named else optimizers["model"]
    data = target(cfg.data.target, "data.target")(**cfg.data.kwargs)
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError(f"data.target {cfg.data.target} must return (train, valid); got {type(data).__name__}")
    train, valid = data
    d = cfg.data
    train_loader, valid_loader = build_loaders(train, valid, d, cfg.experiment.seed)
    if dist is not None:  # this rank's share of the data, before steps per epoch are counted
        dist.shard(train_loader, "train")
        dist.shard(valid_loader, "valid")
    batches = train_loader.batches_per_epoch()
    steps_per_epoch = -(-batches // cfg.train.grad_accumulation) if batches else 0
    schedulers, intervals = {}, {}
    if cfg.scheduler is not None:  # [scheduler.NAME] drives optimizer NAME; one [scheduler]: every one
        sched_tables = dict(cfg.scheduler.named) or dict.fromkeys(optimizers, cfg.scheduler)
        for name, s in sched_tables.items():
            key = f"scheduler.{name}" if cfg.scheduler.named else "scheduler"
            if s.chain:
                schedulers[name] = chain_scheduler(
                    optimizers[name], s, key, target, cfg.train.epochs, steps_per_epoch, cfg.train.max_steps, cfg
                )
                intervals[name] = s.interval
                continue
            cls = target(s.target, f"{key}.target") if s.target else getattr(torch.optim.lr_scheduler, s.name)
            kwargs = fill_scheduler_kwargs(
                cls, dict(s.kwargs), s.interval, cfg.train.epochs, steps_per_epoch, cfg.train.max_steps
            )
            check_total_steps(
                cls,
                s.kwargs,
                key,
                run_length(s.interval, cfg.train.epochs, steps_per_epoch, cfg.train.max_steps),
                length_text(s.interval, cfg.train.epochs, steps_per_epoch, cfg.train.max_steps),
                cfg,
            )
            schedulers[name] = construct(
                cfg, key, s.target or f"torch.optim.lr_scheduler:{s.name}", cls, optimizers[name], **kwargs
            )
            intervals[name] = s.interval
    scheduler = schedulers if cfg.model.named else schedulers.get("model")
    phases = {}
    for key in ("phase", "valid_phase"):
        if spec := getattr(cfg.train, key):
            phases[key] = target(spec, f"train.{key}")()

    def metrics(items, split):
        out = []
        for i, item in enumerate(items):
            if isinstance(item, dict):
                kwargs = {k: v for k, v in item.items() if k not in ("target", "name")}
                key = f"metrics.{split}[{i}]"
                obj = construct(cfg, key, item["target"], target(item["target"], f"{key}.target"), **kwargs)
                out.append(TorchMetric(obj, item.get("name") or item["target"].rsplit(":", 1)[-1]))
            else:
                out.append(item)
        return out

    es = cfg.early_stopping
    early = EarlyStopping(es.monitor, es.mode, es.patience, es.min_delta) if es is not None else None
    # the config's sections are the core's (tuitrain/core/sections.py), checked by the schema: passed as
    # they are, with what other tables set (the scheduler's interval, [ema]) and the metrics built
    train = dataclasses.replace(
        cfg.train,
        ema_decay=cfg.ema.decay if cfg.ema is not None else 0.0,
        scheduler_interval=intervals if cfg.model.named else intervals.get("model", "step"),
    )
    log = dataclasses.replace(cfg.log, capture_output=True)
    if spec := cfg.log.samples.get("target"):  # "module:function" as the function itself
        log.samples = {**cfg.log.samples, "target": target(spec, "log.samples.target")}
    learner = CoreLearner(
        model,
        optimizer,
        loss_fn=loss_fn,
        scheduler=scheduler,
        experiment=Experiment(
            name=cfg.experiment.name,
            seed=cfg.experiment.seed,
            config=cfg.to_dict(),
            env=git_info(cfg.base_dir),
            notes=notes,
        ),
        train=train,
        data=cfg.data,
        log=log,
        metrics=dataclasses.replace(
            cfg.metrics, train=metrics(cfg.metrics.train, "train"), valid=metrics(cfg.metrics.valid, "valid")
        ),
        checkpoint=cfg.checkpoint,
        watch=dataclasses.asdict(cfg.watch),
        early_stopping=early,
        train_phase=phases.get("phase"),
        valid_phase=phases.get("valid_phase"),
        interrupter=interrupter,
        bus=bus,
        run_dir=run_dir,
        strategy=strategy,
    )
    learner.length_change = functools.partial(length_change, cfg.to_dict())
    return learner, train_loader, valid_loader


def construct(cfg, key: str, what: str, fn, *args, **kwargs):
    """`fn(*args, **kwargs)` for the target of table `key`; a TypeError or ValueError that it raises (an
    argument only the callable can judge: torch's "Invalid learning rate") is a ConfigError naming the
    table, with where it was raised when that is the user's code."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as e:
        from tuitrain.config import ConfigError
        from tuitrain.config.schema import origin

        where = ""
        frames = traceback.extract_tb(e.__traceback__)
        if frames and (getattr(fn, "__module__", None) or "").partition(".")[0] != "torch":
            where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
        raise ConfigError(
            f"{what} rejected its arguments: {type(e).__name__}: {e}{where}",
            file=origin(key, cfg.set_keys, cfg.source),
            key=key,
        ) from e


def build_optimizer(opt_cls, model, kwargs: dict, table, key: str, cfg):
    """The optimizer of `model`: a factory whose first parameter is `model` gets the model (its own
    parameter groups); anything else gets the parameters, in two groups with `no_decay`."""
    import torch

    from tuitrain.core.optimization import parameter_groups, takes_model

    what = table.target or f"torch.optim:{table.name}"
    if takes_model(opt_cls):
        built = construct(cfg, key, what, opt_cls, model, **kwargs)
    elif table.no_decay:
        built = construct(cfg, key, what, opt_cls, parameter_groups(model, table.no_decay), **kwargs)
    else:
        built = construct(cfg, key, what, opt_cls, model.parameters(), **kwargs)
    if not isinstance(built, torch.optim.Optimizer):
        from tuitrain.config import ConfigError

        raise ConfigError(
            f"{table.target or table.name} returned {type(built).__name__}, not a torch.optim.Optimizer",
            file=cfg.source,
            key=f"{key}.target",
        )
    return built


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
    return (
        f"auto_scale_lr: {key}.lr {lr:g} -> {kwargs['lr']:g} (effective batch {effective} = batch_size x "
        f"grad_accumulation x processes, base_batch_size {base})"
    )


def git_info(folder: Path) -> dict:
    """The git commit of the config's folder, when it is in a repository: {"git_commit", "git_dirty"}."""
    import subprocess

    try:
        commit = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return {}
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return {"git_commit": commit.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {}


def chain_scheduler(optimizer, sched, key: str, target, epochs: int, steps_per_epoch: int, max_steps: int, cfg):
    """Windows one after another (a warm-up, then cosine): torch's SequentialLR, each window's
    T_max / total_iters / total_steps filled with its length when left out."""
    import torch

    horizon = run_length(sched.interval, epochs, steps_per_epoch, max_steps)
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
        check_total_steps(cls, part.kwargs, part_key, span, f"{span} {sched.interval}s (its window)", cfg)
        what = part.target or f"torch.optim.lr_scheduler:{part.name}"
        parts.append(construct(cfg, part_key, what, cls, optimizer, **kwargs))
        begins.append(begin)
    if len(parts) == 1:
        return parts[0]
    return torch.optim.lr_scheduler.SequentialLR(optimizer, parts, milestones=begins[1:])


def fill_scheduler_kwargs(cls, kwargs: dict, interval: str, epochs: int, steps_per_epoch: int, max_steps: int) -> dict:
    """Fill total_steps / T_max / epochs+steps_per_epoch when the class needs them and they are left out."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return kwargs
    horizon = run_length(interval, epochs, steps_per_epoch, max_steps)
    if (
        "total_steps" in params
        and "total_steps" not in kwargs
        and not ("epochs" in kwargs and "steps_per_epoch" in kwargs)
    ):
        kwargs["total_steps"] = max(1, horizon)
    if "T_max" in params and "T_max" not in kwargs:
        kwargs["T_max"] = max(1, horizon)
    if (
        "total_iters" in params
        and "total_iters" not in kwargs
        and params["total_iters"].default is inspect.Parameter.empty
    ):
        kwargs["total_iters"] = max(1, horizon)
    return kwargs


def run_length(interval: str, epochs: int, steps_per_epoch: int, max_steps: int) -> int:
    """How many times a scheduler stepping every `interval` ("step" or "epoch") steps in the whole run
    (0: unknown, a data set without a length and no max_steps)."""
    if interval != "step":
        return epochs
    total = epochs * steps_per_epoch
    if max_steps:
        total = min(total, max_steps) if total else max_steps
    return total


def length_text(interval: str, epochs: int, steps_per_epoch: int, max_steps: int) -> str:
    """The run's length in words, with the settings it comes from."""
    if interval != "step":
        return f'{epochs} epochs (train.epochs; scheduler.interval = "epoch")'
    total = run_length(interval, epochs, steps_per_epoch, max_steps)
    if max_steps and total == max_steps and max_steps != epochs * steps_per_epoch:
        return f"{total} steps (train.max_steps)"
    return f"{total} steps (train.epochs {epochs} x {steps_per_epoch} steps an epoch)"


def check_total_steps(cls, given: dict, key: str, length: int, what: str, cfg) -> None:
    """A OneCycleLR total_steps the config sets itself (or epochs x steps_per_epoch), shorter than the
    run it drives (`length`, `what` in words): a ConfigError now, not torch's ValueError at the step
    after it, mid-run (a filled-in one is the run's length, stretched on a longer resume)."""
    import torch

    if not (isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.OneCycleLR)) or not length:
        return
    if "total_steps" in given:
        name, total = "total_steps", given["total_steps"]
    elif "epochs" in given and "steps_per_epoch" in given:
        name, total = "epochs", given["epochs"] * given["steps_per_epoch"]
    else:
        return
    if not isinstance(total, int) or total >= length:
        return
    from tuitrain.config import ConfigError
    from tuitrain.config.schema import origin

    shown = f"{total}" if name == "total_steps" else f"{given['epochs']} x {given['steps_per_epoch']} = {total}"
    raise ConfigError(
        f"{shown} is shorter than what it schedules: {what}; OneCycleLR would fail at the "
        f"{'step' if 'step' in what else 'epoch'} after {total}. Set it to {length} or more, or leave "
        f"it out (tuitrain then fills in the run's length, and stretches it when a resume trains longer)",
        file=origin(f"{key}.{name}", cfg.set_keys, cfg.source),
        key=f"{key}.{name}",
    )


#: the settings a run's length in steps comes from
LENGTH_KEYS = ("train.epochs", "train.max_steps", "train.grad_accumulation", "data.batch_size", "train.devices")


def length_change(now: dict, saved: dict) -> str:
    """Why a resumed run's length differs from its checkpoint's: the settings of `LENGTH_KEYS` that
    changed between the checkpoint's config `saved` and this run's `now` ("train.epochs changed 3 -> 5");
    "" when none did (the data's size, say)."""

    def get(config: dict, key: str):
        table, _, name = key.partition(".")
        return (config.get(table) or {}).get(name)

    return ", ".join(
        f"{key} changed {get(saved, key)} -> {get(now, key)}"
        for key in LENGTH_KEYS
        if get(saved, key) is not None and get(saved, key) != get(now, key)
    )
