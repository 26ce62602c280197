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
    from tuitrain.core.learner_checkpoint import state_mismatch

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
            return state_mismatch(saved, mine, "this config's") or _optimizers_mismatch(cfg, data, models, target)
        except Exception:  # a checkpoint of a shape not foreseen here: the run loads it and says
            return None


def _optimizers_mismatch(cfg: Any, data: Mapping[str, Any], models: dict, target: Any) -> str | None:
    """`optimizers_mismatch` for the optimizers `cfg` builds on the meta `models`; None also when one of them
    cannot be built there (the run builds it and says what is wrong)."""
    import torch

    from tuitrain.core.learner_checkpoint import optimizers_mismatch
    from tuitrain.run.build import build_optimizer

    tables = dict(cfg.optimizer.named) or dict.fromkeys(models, cfg.optimizer)
    optimizers = {}
    for name, table in tables.items():
        if name not in models:  # the config's own check says so
            continue
        key = f"optimizer.{name}" if cfg.optimizer.named else "optimizer"
        try:
            opt_cls = target(table.target, f"{key}.target") if table.target else getattr(torch.optim, table.name)
            optimizers[name] = build_optimizer(opt_cls, models[name], dict(table.kwargs), table, key, cfg)
        except Exception:
            return None
    return optimizers_mismatch(data, optimizers, "this config's")
