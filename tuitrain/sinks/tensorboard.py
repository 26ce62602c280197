"""`TensorBoardSink`: logged metrics as TensorBoard scalars under `run_dir/tensorboard/`
(`[log] tensorboard = true`).

Tags: `<split>/<metric>` for step values, `<split>/epoch_<metric>` for a phase's aggregate, both
at the global optimizer step so that the two curves line up. The optional `tensorboard` package and
`torch.utils.tensorboard` are imported in the constructor only; must not import textual.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from tuitrain.core.events import EpochCompleted, Event, MetricsLogged, RunFailed, RunFinished

MISSING = "tensorboard is not installed: pip install 'tuitrain[tensorboard]'"


def summary_writer_class() -> Any:
    """torch's SummaryWriter; RuntimeError with the install hint when tensorboard is missing."""
    # checked first so the hint comes without paying for a torch import
    if importlib.util.find_spec("tensorboard") is None:
        raise RuntimeError(MISSING)
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise RuntimeError(MISSING) from e
    return SummaryWriter


def _scalar(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class TensorBoardSink:
    """Writes every numeric logged metric as a scalar; flushes per epoch and at the end."""

    stores_run = True  # a failed write (a full disk) ends the run: see EventBus.on_write_failure
    step_events = False  # the EventBus spares it StepStarted/StepCompleted: it ignores them
    batch_events = True  # it may get the frequent events in batches (EventBus)

    def __init__(self, run_dir: str | os.PathLike, log_dir: str | os.PathLike | None = None) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else Path(run_dir) / "tensorboard"
        self.writer = summary_writer_class()(log_dir=str(self.log_dir))

    def __call__(self, event: Event, state: object = None) -> None:
        if self.writer is None:  # closed
            return
        match event:
            case MetricsLogged(split=split, step=step, metrics=metrics, scope=scope):
                prefix = "epoch_" if scope == "epoch" else ""
                for name, value in metrics.items():
                    v = _scalar(value)
                    if v is not None:
                        self.writer.add_scalar(f"{split}/{prefix}{name}", v, global_step=step, walltime=event.time)
            case EpochCompleted() | RunFinished() | RunFailed():
                self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
