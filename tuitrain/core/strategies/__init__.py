"""Training strategies: one process, or ranks on torch.distributed (DDP or FSDP, spawned by tuitrain or
launched by torchrun), as peers behind one protocol (`base.Strategy`).

`base.py` is the protocol and the one-process strategy; `agreement.py` the one place where ranks decide
the same thing at the same step; `ddp.py` what runs inside each rank (the process group, DDPStrategy);
`fsdp.py` FSDPStrategy on it and `sharded.py` its sharded checkpoints. Starting ranks from a config
and carrying their events to the parent is the run layer's (`tuitrain/run/launch.py`). This module
only reads the environment, so importing it costs nothing (no torch). Must not import textual, nor
anything of tuitrain outside `tuitrain.core`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Strategy
    from .ddp import DistContext


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


def strategy_for(ctx: DistContext | None = None) -> Strategy:
    """The strategy of a rank whose process group `ctx` (a DistContext) describes; None: one process."""
    if ctx is None:
        from .base import Strategy

        return Strategy()
    if ctx.strategy == "fsdp":
        from .fsdp import FSDPStrategy

        return FSDPStrategy(ctx)
    from .ddp import DDPStrategy

    return DDPStrategy(ctx)
