"""Multi-process training strategies on torch.distributed: DDP or FSDP, spawned by tuitrain or launched
by torchrun.

`ddp.py` holds what runs inside each rank (the process group, the DDP Learner, the agreed control
flags); `fsdp.py` builds the FSDP2 Learner on it and `sharded.py` reads and writes its sharded
checkpoints. Starting ranks from a config and carrying their events to the parent is the run layer's
(`tuitrain/run/launch.py`). This module only reads the environment, so importing it costs nothing
(no torch). Must not import textual, nor anything of tuitrain outside `tuitrain.core`.
"""

from __future__ import annotations

import os


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
