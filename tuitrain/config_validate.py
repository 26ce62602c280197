"""`validate(cfg)`: every check possible before training, short of building anything heavy.

It imports the targets (the user's modules, torch.optim) and checks their keyword arguments,
the metric targets, the dashboard theme and checkpoint.init_from. torch is imported here lazily,
inside validate; textual never.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from tuitrain.config_schema import Config, ConfigError, errors_in, suggest
from tuitrain.config_targets import check_kwargs, resolve_target
from tuitrain.themes import available_themes, find_theme

# what tuitrain passes to a scheduler besides the optimizer, when the config leaves it out
SCHEDULER_FILLED_IN = ("optimizer", "total_steps", "T_max", "epochs", "steps_per_epoch")


def validate(cfg: Config) -> None:
    """Raise ConfigError on the first problem found; the optimizer gets `params` and the
    scheduler `optimizer` as their first positional argument."""
    from tuitrain.config import check_values  # config imports this module at its end

    with errors_in(cfg.source, cfg.set_keys):
        check_values(cfg)
        for key in ("model", "data", "loss"):
            section = getattr(cfg, key)
            fn = resolve_target(section.target, cfg.base_dir, f"{key}.target")
            check_kwargs(fn, section.kwargs, key, target=section.target)
        _validate_optimizer(cfg)
        if cfg.scheduler is not None:
            _validate_scheduler(cfg)
        for split in ("train", "valid"):
            for i, item in enumerate(getattr(cfg.metrics, split)):
                if isinstance(item, dict):
                    key = f"metrics.{split}[{i}]"
                    fn = resolve_target(item["target"], cfg.base_dir, f"{key}.target")
                    kwargs = {k: v for k, v in item.items() if k not in ("target", "name")}
                    check_kwargs(fn, kwargs, key, target=item["target"])
        _validate_theme(cfg)
        _validate_init_from(cfg)


def _torch_classes(module, base: type, exclude: tuple[str, ...]) -> dict[str, type]:
    return {n: c for n, c in vars(module).items()
            if inspect.isclass(c) and issubclass(c, base) and n not in exclude
            and not n.startswith("_")}


def _validate_optimizer(cfg: Config) -> None:
    opt = cfg.optimizer
    if opt.target:
        fn = resolve_target(opt.target, cfg.base_dir, "optimizer.target")
        what = opt.target
    else:
        import torch.optim

        classes = _torch_classes(torch.optim, torch.optim.Optimizer, ("Optimizer",))
        if opt.name not in classes:
            raise ConfigError(f"no optimizer {opt.name!r} in torch.optim{suggest(opt.name, classes)}",
                              key="optimizer.name")
        fn, what = classes[opt.name], f"torch.optim:{opt.name}"
    check_kwargs(fn, opt.kwargs, "optimizer", provided=("params",), positional=1, target=what)


def _validate_scheduler(cfg: Config) -> None:
    sched = cfg.scheduler
    if sched.target:
        fn = resolve_target(sched.target, cfg.base_dir, "scheduler.target")
        what = sched.target
    else:
        from torch.optim import lr_scheduler

        classes = _torch_classes(lr_scheduler, lr_scheduler.LRScheduler, ("LRScheduler",))
        if sched.name not in classes:
            raise ConfigError(f"no scheduler {sched.name!r} in torch.optim.lr_scheduler"
                              + suggest(sched.name, classes), key="scheduler.name")
        fn, what = classes[sched.name], f"torch.optim.lr_scheduler:{sched.name}"
    check_kwargs(fn, sched.kwargs, "scheduler", provided=SCHEDULER_FILLED_IN, positional=1,
                 target=what)


def _validate_theme(cfg: Config) -> None:
    theme = cfg.dashboard.theme
    if find_theme(theme, cfg.base_dir) is not None:
        return
    if theme.endswith(".tcss"):
        raise ConfigError(f"no such file {theme!r} (looked in {cfg.base_dir} and {Path.cwd()})",
                          key="dashboard.theme")
    names = available_themes()
    raise ConfigError(f"unknown theme {theme!r}{suggest(theme, names)}; available: "
                      f"{', '.join(names) or 'none'}, or a path to a .tcss file",
                      key="dashboard.theme")


def _validate_init_from(cfg: Config) -> None:
    init_from = cfg.checkpoint.init_from
    if init_from and not Path(init_from).expanduser().exists():
        raise ConfigError(f"no such file or folder {init_from!r} (relative to {Path.cwd()})",
                          key="checkpoint.init_from")
