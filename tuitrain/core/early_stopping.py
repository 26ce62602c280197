"""Early stopping: a small policy that watches one epoch metric and decides when to stop."""

from __future__ import annotations

import math
from typing import Any


class EarlyStopping:
    def __init__(
        self, monitor: str = "valid/loss", mode: str = "min", patience: int = 5, min_delta: float = 0.0
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', not {mode!r}")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, abs(min_delta)
        self.best: float | None = None
        self.best_epoch = 0
        self.bad_epochs = 0
        self.message = ""

    def improved(self, value: float) -> bool:
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def update(self, epoch_metrics: dict[str, Any], epoch: int) -> bool:
        """Feed one epoch's metrics; True when training should stop."""
        value = epoch_metrics.get(self.monitor)
        if value is None:
            return False  # not measured this epoch (validate_every > 1)
        if isinstance(value, float) and math.isnan(value):
            self.bad_epochs += 1
        elif self.improved(value):
            self.best, self.best_epoch, self.bad_epochs = float(value), epoch, 0
        else:
            self.bad_epochs += 1
        if self.bad_epochs >= self.patience:
            self.message = (
                f"early stopping at epoch {epoch}: {self.monitor} has not improved by more than "
                f"{self.min_delta:g} for {self.patience} epoch(s); best {self.best:.6g} at epoch "
                f"{self.best_epoch}"
            )
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch, self.bad_epochs = state["best"], state["best_epoch"], state["bad_epochs"]
