"""Multi-process training strategies on torch.distributed: DDP or FSDP, spawned by tuitrain or launched
by torchrun.

`ddp.py` holds what runs inside each rank (the process group, the DDP Learner, the agreed control
flags); `fsdp.py` builds the FSDP2 Learner on it and `sharded.py` reads and writes its sharded
checkpoints; `launch.py` starts ranks and carries their events to the parent. This module only reads
the environment and the config, so importing it costs nothing (no torch). Must not import textual.
"""

from __future__ import annotations

import os
from typing import Any


def torchrun_env() -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) when this process was started by torchrun with 2+ ranks."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ["RANK"])
    except (KeyError, ValueError):
        return None
    if world < 2:
        return None
    return rank, world, int(os.environ.get("LOCAL_RANK", rank))


def quiet_rank() -> bool:
    """A torchrun rank other than 0: it trains, but writes nothing and shows nothing."""
    env = torchrun_env()
    return env is not None and env[0] != 0


def distributed_wanted(cfg: Any) -> bool:
    """Several processes: under torchrun, or ddp/fsdp with devices > 1 (one device trains as "single")."""
    return torchrun_env() is not None or (cfg.train.strategy in ("ddp", "fsdp") and cfg.train.devices > 1)


def check_config(cfg: Any) -> None:
    """ConfigError for a distributed setup that cannot start (called before anything is written)."""
    from ...config import ConfigError

    t = cfg.train
    if not distributed_wanted(cfg):
        return
    name = "fsdp" if t.strategy == "fsdp" else "ddp"
    if getattr(cfg.model, "named", None):
        raise ConfigError(f"{name} trains one model; several models ([model.NAME] tables) need strategy "
                          "\"single\"", file=cfg.source, key="train.strategy")
    if t.device == "mps" or t.device.startswith("mps"):
        raise ConfigError(f"{name} runs on CPU (gloo) or CUDA (NCCL), not on mps", file=cfg.source,
                          key="train.device")
    if torchrun_env() is not None:
        return
    if t.device.startswith("cuda") or t.device == "auto":
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if t.device.startswith("cuda") and n == 0:
            raise ConfigError(f"device {t.device!r} requested but CUDA is not available", file=cfg.source,
                              key="train.device")
        if n and t.devices > n:
            raise ConfigError(f"devices = {t.devices} but only {n} CUDA device(s): {name} uses one GPU per "
                              f"process (set device = \"cpu\" for CPU processes)", file=cfg.source,
                              key="train.devices")
