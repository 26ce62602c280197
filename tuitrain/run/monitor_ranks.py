"""A `Monitor` among ranks (torchrun, or any initialized process group): the agreement joined once there
is a process group (a gloo group for the exchanges, rank 0's run directory and screen known on every
rank), and, under a dashboard, the output of a rank other than 0 into RUN_DIR/ranks/rank-N.log, never
over the screen. Must not import textual.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tuitrain.core.control import Interrupter
from tuitrain.run.redirect import Redirect


class Ranks:
    """`synced`: the rank's `SyncedInterrupter` once joined (None before, and in one process);
    `pending`: ranks known (torchrun) but no process group yet, joined at the next `join`."""

    def __init__(self, interrupter: Interrupter) -> None:
        self.interrupter = interrupter
        self.synced: Any = None
        self.pending = False
        self._output = Redirect()
        self._signals: Any = None

    def join(self, rank: int, owner: bool, run_dir: Path | None, screen: str) -> tuple[Path | None, str] | None:
        """Agree from here on, given the owner's run directory and screen (others': anything); the
        owner's, or None while there is no process group (`pending`: the caller asks again)."""
        dist = sys.modules.get("torch.distributed")  # only when the user's code has loaded it
        if dist is None or not dist.is_initialized():
            self.pending = True
            return None
        self.pending = False
        from tuitrain.core.strategies.agreement import SyncedInterrupter, control_group

        group = control_group()
        shared = [str(run_dir) if owner and run_dir else "", screen if owner else ""]
        dist.broadcast_object_list(shared, src=0, group=group)
        self.synced = SyncedInterrupter(rank, group, inbox=self.interrupter)
        return (Path(shared[0]) if shared[0] else None), shared[1]

    def other(self, rank: int, run_dir: Path | None, dashboard: bool) -> None:
        """This rank is not the run's owner: a signal to it counts as a stop request for every rank (the
        agreement), and under a dashboard (rank 0's) its stdout and stderr go to RUN_DIR/ranks/rank-N.log."""
        from tuitrain.run.signals import StopOnSignals

        self._signals = StopOnSignals(self.interrupter, sigint=True).__enter__()
        if dashboard and run_dir is not None:
            folder = run_dir / "ranks"
            folder.mkdir(parents=True, exist_ok=True)
            self._output.to(folder / f"rank-{rank}.log")

    def close(self) -> None:
        if self.synced is not None:
            self.synced.close()
        if self._signals is not None:
            self._signals.__exit__()
        self._output.back()
