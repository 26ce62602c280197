"""The one preflight: every check of a config that can fail before anything is written or built.

`preflight(cfg)` checks the file's content (`tuitrain.config.validate`: keys, types, targets,
theme) and then the environment it is to run in: a device this machine has (and its peak TFLOP/s
when `mfu` is asked for), torch.compile where it works, TensorBoard installed when asked for, weights
to start from that load, and a distributed setup that can start (`check_ranks`). Each failure is a
ConfigError naming the file and the key (exit 2). `tuitrain run`, its torchrun ranks and
`tuitrain lr-find` all call it. `resume_mismatch` checks a resume's checkpoint against the model and
optimizers the config builds (on the meta device), before the run directory is touched. Must not import
textual.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import Any

from tuitrain.config import ConfigError, validate
from tuitrain.core.strategies import torchrun_env


def preflight(cfg: Any) -> None:
    """The config's content, then the environment; ConfigError on the first thing wrong."""
    validate(cfg)
    if cfg.train.compile:
        import torch

        if not hasattr(torch, "compile") or not torch._dynamo.is_dynamo_supported():
            raise ConfigError(
                f"torch.compile is not supported with Python {sys.version.split()[0]} and torch "
                f"{torch.__version__} on this platform; set compile = false",
                file=cfg.source,
                key="train.compile",
            )
    try:  # a device this machine does not have is a config error, found before anything is written
        from tuitrain.core.environment import resolve_device

        device = resolve_device(cfg.train.device)
    except RuntimeError as e:
        raise ConfigError(str(e), file=cfg.source, key="train.device") from None
    check_peak(cfg, device)
    if cfg.train.strategy != "single" or os.environ.get("WORLD_SIZE"):
        check_ranks(cfg)
    if cfg.log.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "tensorboard is not installed: pip install 'tuitrain[tensorboard]'", file=cfg.source, key="log.tensorboard"
        )
    if cfg.checkpoint.init_from:
        from tuitrain.core.checkpoint import CheckpointError, check_weights_file

        try:
            check_weights_file(cfg.checkpoint.init_from)
        except CheckpointError as e:
            raise ConfigError(str(e), file=cfg.source, key="checkpoint.init_from") from None


def check_peak(cfg: Any, device: Any) -> None:
    """ConfigError when metric `mfu` is asked for with no peak to divide by: none given and none in
    the GPU table for this device (a CPU, MPS, an unknown GPU)."""
    asked = [item for items in (cfg.metrics.train, cfg.metrics.valid) for item in items if item == "mfu"]
    if not asked or cfg.train.peak_tflops:
        return
    from tuitrain.core.flops import peak_for

    try:
        peak_for(device, 0.0, key="train.peak_tflops")
    except ValueError as e:
        raise ConfigError(str(e), file=cfg.source, key="train.peak_tflops") from None


def distributed_wanted(cfg: Any) -> bool:
    """Several processes: under torchrun, or ddp/fsdp with devices > 1 (one device trains as "single")."""
    return torchrun_env() is not None or (cfg.train.strategy in ("ddp", "fsdp") and cfg.train.devices > 1)


def check_ranks(cfg: Any) -> None:
    """ConfigError for a distributed setup that cannot start."""
    t = cfg.train
    if not distributed_wanted(cfg):
        return
    name = "fsdp" if t.strategy == "fsdp" else "ddp"
    if getattr(cfg.model, "named", None):
        raise ConfigError(
            f'{name} trains one model; several models ([model.NAME] tables) need strategy "single"',
            file=cfg.source,
            key="train.strategy",
        )
    if t.device == "mps" or t.device.startswith("mps"):
        raise ConfigError(f"{name} runs on CPU (gloo) or CUDA (NCCL), not on mps", file=cfg.source, key="train.device")
    if torchrun_env() is not None:
        return
    if t.device.startswith("cuda") or t.device == "auto":
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if t.device.startswith("cuda") and n == 0:
            raise ConfigError(
                f"device {t.device!r} requested but CUDA is not available", file=cfg.source, key="train.device"
            )
        if n and t.devices > n:
            raise ConfigError(
                f"devices = {t.devices} but only {n} CUDA device(s): {name} uses one GPU per "
                f'process (set device = "cpu" for CPU processes)',
                file=cfg.source,
                key="train.devices",
            )


def resume_mismatch(cfg: Any, data: Mapping[str, Any]) -> str | None:
    """What keeps checkpoint `data` from loading into the model and optimizers `cfg` builds, in a few words
    (the first parameter whose name or shape differs; an optimizer whose parameter groups differ); None when
    it fits, or when that cannot be told without training (a sharded checkpoint; a model that cannot be built
    on the meta device: the run then says what it finds). The model is built on the meta device (no memory,
    no weights), what it prints is dropped; nothing is written."""
    saved = data.get("model")
    if not isinstance(saved, Mapping):  # a sharded (fsdp) checkpoint: its shards say what they hold
        return None
    import contextlib
    import io
    import warnings

    import torch

    from tuitrain.config import named_parts, resolve_target

    target = lambda spec, key: resolve_target(spec, cfg.base_dir, key, file=cfg.source)  # noqa: E731
    quiet = io.StringIO()
    try:  # imported here, not under the meta device: what a module makes as it is imported stays real
        makers = {
            key.partition(".")[2] or "model": (target(m.target, f"{key}.target"), m.kwargs)
            for key, m in named_parts(cfg.model, "model")
        }
    except Exception:  # the run says what is wrong
        return None
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.device("meta"):
                models = {name: make(**kwargs) for name, (make, kwargs) in makers.items()}
            model = torch.nn.ModuleDict(models) if cfg.model.named else models["model"]
            mine = model.state_dict()
        except Exception:  # the run builds it for real and says what is wrong
            return None
        try:
            return _state_mismatch(saved, mine) or _optimizer_mismatch(cfg, data, models, target)
        except Exception:  # a checkpoint of a shape not foreseen here: the run loads it and says
            return None


def _shape(value: Any) -> str:
    import torch

    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def _state_mismatch(saved: Mapping[str, Any], mine: Mapping[str, Any]) -> str | None:
    """The first of `mine`'s entries that `saved` lacks or holds in another shape, or the first `saved` has
    that `mine` lacks, as `load_state_dict(strict=True)` would refuse them; None when they fit."""
    import torch
    from torch.nn.parameter import is_lazy

    differ = [
        k
        for k, v in mine.items()
        if k in saved and isinstance(v, torch.Tensor) and isinstance(saved[k], torch.Tensor) and not is_lazy(v)
        if v.shape != saved[k].shape
    ]
    missing = [k for k in mine if k not in saved]
    unexpected = [k for k in saved if k not in mine]
    more = len(differ) + len(missing) + len(unexpected) - 1
    tail = f" (and {more} more parameter{'s' if more > 1 else ''} differ)" if more > 0 else ""
    if differ:
        k = differ[0]
        return f"{k} is {_shape(saved[k])} in the checkpoint and {_shape(mine[k])} in this config's model{tail}"
    if missing:
        return f"this config's model has {missing[0]}, the checkpoint has not{tail}"
    if unexpected:
        return f"the checkpoint has {unexpected[0]}, this config's model has not{tail}"
    return None


def _optimizer_mismatch(cfg: Any, data: Mapping[str, Any], models: dict, target: Any) -> str | None:
    """The first optimizer of `cfg` that the checkpoint lacks or holds with other parameter groups (their
    number, or the parameters in one), as `Optimizer.load_state_dict` would refuse it; None when they fit or
    when this config's optimizer cannot be built on the meta model."""
    import torch

    from tuitrain.run.build import build_optimizer

    saved = data.get("optimizers") or []
    tables = dict(cfg.optimizer.named) or dict.fromkeys(models, cfg.optimizer)
    names = data.get("optimizer_names") or list(tables)[: len(saved)]
    by_name = dict(zip(names, saved))
    for name, table in tables.items():
        if name not in models:  # the config's own check says so
            continue
        if name not in by_name:
            return f"the checkpoint has no optimizer {name!r} (it has: {', '.join(names) or 'none'})"
        key = f"optimizer.{name}" if cfg.optimizer.named else "optimizer"
        try:
            opt_cls = target(table.target, f"{key}.target") if table.target else getattr(torch.optim, table.name)
            groups = build_optimizer(opt_cls, models[name], dict(table.kwargs), table, key, cfg).param_groups
            there = [len(g["params"]) for g in by_name[name]["param_groups"]]
        except Exception:  # the run builds it for real and says what is wrong
            continue
        here = [len(g["params"]) for g in groups]
        what = "optimizer" if name == "model" else f"optimizer {name!r}"
        if len(here) != len(there):
            return (
                f"its {what} has {len(there)} parameter group{'s' if len(there) != 1 else ''}, "
                f"this config's has {len(here)}"
            )
        for i, (a, b) in enumerate(zip(there, here)):
            if a != b:
                return f"parameter group {i} of its {what} holds {a} parameters, this config's holds {b}"
    return None
