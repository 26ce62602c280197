"""`validate(cfg)`: every check possible before training, short of building anything heavy.

It imports the targets (the user's modules, torch.optim) and checks their keyword arguments,
the metric targets, the dashboard theme and checkpoint.init_from. torch is imported here lazily,
inside validate; textual never.
"""

from __future__ import annotations

from typing import Any

import inspect
from pathlib import Path

from tuitrain.config.loading import chain_parts, check_values, named_parts
from tuitrain.config.schema import Config, ConfigError, errors_in, suggest
from tuitrain.config.targets import check_kwargs, resolve_target
from tuitrain.dashboard.themes import ThemeError, resolve_theme

# what tuitrain passes to a scheduler besides the optimizer, when the config leaves it out
SCHEDULER_FILLED_IN = ("optimizer", "total_steps", "T_max", "epochs", "steps_per_epoch")


def validate(cfg: Config) -> None:
    """Raise ConfigError on the first problem found; the optimizer gets `params` and the
    scheduler `optimizer` as their first positional argument."""

    with errors_in(cfg.source, cfg.set_keys):
        check_values(cfg)
        for key, section in [*named_parts(cfg.model, "model"), ("data", cfg.data), ("loss", cfg.loss)]:
            fn = resolve_target(section.target, cfg.base_dir, f"{key}.target")
            check_kwargs(fn, section.kwargs, key, target=section.target)
        for key, opt in named_parts(cfg.optimizer, "optimizer"):
            _validate_optimizer(cfg, opt, key)
        for key, sched in named_parts(cfg.scheduler, "scheduler"):
            _validate_scheduler(cfg, sched, key)
        for key in ("train.phase", "train.valid_phase"):
            if spec := getattr(cfg.train, key.split(".")[1]):
                _validate_phase(cfg, spec, key)
        for split in ("train", "valid"):
            for i, item in enumerate(getattr(cfg.metrics, split)):
                if isinstance(item, dict):
                    key = f"metrics.{split}[{i}]"
                    fn = resolve_target(item["target"], cfg.base_dir, f"{key}.target")
                    kwargs = {k: v for k, v in item.items() if k not in ("target", "name")}
                    check_kwargs(fn, kwargs, key, target=item["target"])
        _validate_step_values(cfg)
        if target := cfg.log.samples.get("target"):
            fn = resolve_target(target, cfg.base_dir, "log.samples.target")
            if not callable(fn):
                raise ConfigError(f"{target!r} is not a function (model, step)", key="log.samples.target")
        _validate_theme(cfg)
        _validate_init_from(cfg)


def _validate_step_values(cfg: Config) -> None:
    """A metric name that is not built in is a value the step returns by name; tuitrain's own step returns
    none (the loss, the output, the target), so where the model is a class without train_step/valid_step
    and no phase of the user's runs the split, such a name can only be a slip ("acc"): said now, not at
    the first step of the run (or after a whole epoch of training, for a valid one)."""
    from tuitrain.config.loading import BUILTIN_METRICS, TOPK_RE

    models = named_parts(cfg.model, "model")
    if len(models) != 1:  # several models train through a phase of the user's
        return
    cls = resolve_target(models[0][1].target, cfg.base_dir, "model.target")
    if not inspect.isclass(cls):  # a function that builds the model: what it builds is not known here
        return
    for split, phase, method in (
        ("train", cfg.train.phase, "train_step"),
        ("valid", cfg.train.valid_phase, "valid_step"),
    ):
        if phase or hasattr(cls, method):
            continue
        for i, item in enumerate(getattr(cfg.metrics, split)):
            if not isinstance(item, str) or item in BUILTIN_METRICS or TOPK_RE.match(item):
                continue
            near = [b for b in BUILTIN_METRICS if b.startswith(item)][:1]
            hint = f" (did you mean '{near[0]}'?)" if near else suggest(item, BUILTIN_METRICS)
            raise ConfigError(
                f"unknown metric {item!r}{hint}: it is not built in ({', '.join(BUILTIN_METRICS)}, topK_accuracy), "
                f"and {cls.__name__} has no {method} to return a value by that name; for another metric give a "
                'table with a target (e.g. { target = "torchmetrics:F1Score", task = "binary" })',
                key=f"metrics.{split}[{i}]",
            )


def _torch_classes(module: Any, base: type, exclude: tuple[str, ...]) -> dict[str, type]:
    return {
        n: c
        for n, c in vars(module).items()
        if inspect.isclass(c) and issubclass(c, base) and n not in exclude and not n.startswith("_")
    }


def _validate_phase(cfg: Config, spec: str, key: str) -> None:
    from tuitrain.core.phases import Phase

    cls = resolve_target(spec, cfg.base_dir, key)
    if not (inspect.isclass(cls) and issubclass(cls, Phase)):
        raise ConfigError(
            f"{spec!r} is not a Phase class (subclass tuitrain.CustomTrainPhase, TrainPhase or ValidPhase)", key=key
        )
    training = key == "train.phase"
    if cls.training != training:
        raise ConfigError(
            f"{spec!r} is a {'validation' if cls.training is False else 'training'} phase; "
            f"{key} needs a {'training' if training else 'validation'} one",
            key=key,
        )
    if training and len(named_parts(cfg.model, "model")) > 1 and not getattr(cls, "manual_optimization", False):
        raise ConfigError(
            f"{spec!r} leaves the optimizer step to tuitrain, which cannot step several models' "
            "optimizers: subclass tuitrain.CustomTrainPhase",
            key=key,
        )
    check_kwargs(cls, {}, key, target=spec)


def _validate_optimizer(cfg: Config, opt: Any, key: str = "optimizer") -> None:
    from tuitrain.core.optimization import takes_model

    if opt.target:
        fn = resolve_target(opt.target, cfg.base_dir, f"{key}.target")
        what = opt.target
        if takes_model(fn):  # a factory of the user's that builds its own parameter groups
            if opt.no_decay:
                raise ConfigError(
                    f"{what} takes the model and builds its own parameter groups; no_decay "
                    "applies to optimizers built from the parameters",
                    key=f"{key}.no_decay",
                )
            check_kwargs(fn, opt.kwargs, key, provided=("model",), positional=1, target=what)
            return
    else:
        import torch.optim

        classes = _torch_classes(torch.optim, torch.optim.Optimizer, ("Optimizer",))
        if opt.name not in classes:
            raise ConfigError(
                f"no optimizer {opt.name!r} in torch.optim{suggest(opt.name, classes)}", key=f"{key}.name"
            )
        fn, what = classes[opt.name], f"torch.optim:{opt.name}"
    check_kwargs(fn, opt.kwargs, key, provided=("params",), positional=1, target=what)


def _validate_scheduler(cfg: Config, sched: Any, key: str = "scheduler") -> None:
    if sched.chain:
        for part_key, part, _, _ in chain_parts(sched, key):
            _validate_scheduler(cfg, part, part_key)
        return
    if sched.target:
        fn = resolve_target(sched.target, cfg.base_dir, f"{key}.target")
        what = sched.target
    else:
        from torch.optim import lr_scheduler

        classes = _torch_classes(lr_scheduler, lr_scheduler.LRScheduler, ("LRScheduler",))
        if sched.name not in classes:
            raise ConfigError(
                f"no scheduler {sched.name!r} in torch.optim.lr_scheduler" + suggest(sched.name, classes),
                key=f"{key}.name",
            )
        fn, what = classes[sched.name], f"torch.optim.lr_scheduler:{sched.name}"
    check_kwargs(fn, sched.kwargs, key, provided=SCHEDULER_FILLED_IN, positional=1, target=what)


def _validate_theme(cfg: Config) -> None:
    try:
        resolve_theme(cfg.dashboard.theme, cfg.base_dir)
    except ThemeError as e:
        raise ConfigError(str(e), key="dashboard.theme") from None


def _validate_init_from(cfg: Config) -> None:
    init_from = cfg.checkpoint.init_from
    if init_from and not Path(init_from).expanduser().exists():
        raise ConfigError(
            f"no such file or folder {init_from!r} (relative to {Path.cwd()})", key="checkpoint.init_from"
        )
