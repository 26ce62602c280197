"""The media calls the integrations' callbacks share: `log_text`, `log_image` and `log_histogram` with
the shape WandbLogger and TensorBoard's SummaryWriter have (`name, value, step=None`), handed to the run's
`Monitor` (tuitrain/core/media.py does the work, off the loop's thread). The step defaults to the
framework's global step. Outside a fit (no run) and on ranks other than 0 they do nothing.
"""

from __future__ import annotations

from typing import Any


class MediaCalls:
    """Mixed into a callback that has `monitor` (the run's Monitor, or None) and `_global_step()`."""

    monitor: Any = None

    def _global_step(self) -> int:  # pragma: no cover - each callback says its own
        raise NotImplementedError

    def _media(self, what: str, name: str, value: Any, step: int | None) -> None:
        mon = self.monitor
        if mon is not None:
            getattr(mon, what)(self._global_step() if step is None else int(step), name, value)

    def log_text(self, name: str, text: str, step: int | None = None) -> None:
        """A text (a generated sample) under `name`: RUN_DIR/media/<name>/<step>.txt, in the samples panel."""
        self._media("log_text", name, text, step)

    def log_image(self, name: str, images: Any, step: int | None = None) -> None:
        """An image or a batch as a grid (a tensor (C,H,W) or (N,C,H,W) of floats in [0,1] or uint8, numpy
        (H,W) or (H,W,C), a PIL image, a list of them): RUN_DIR/media/<name>/<step>.png."""
        self._media("log_image", name, images, step)

    def log_histogram(self, name: str, values: Any, step: int | None = None) -> None:
        """The distribution of `values` (a tensor, or a list of tensors counted together)."""
        self._media("log_histogram", name, values, step)
