"""`WeightAverage`: an exponential moving average of a model's weights, kept on the model's device.

After each optimizer step (torch's own step post-hook, so a step the AMP scaler skips is skipped here
too) every floating-point tensor of the model's state moves toward the model's:
`avg = decay * avg + (1 - decay) * weight`; other tensors (step counters) are copied. Validation and
the final `model.pt` use the average (`swapped_in`); a checkpoint holds it, so a resume is exact.
Must not import textual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle


class WeightAverage:
    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the weight average's decay must be between 0 and 1 (exclusive), not {decay!r}")
        self.model = model
        self.decay = float(decay)
        self.updates = 0
        self._names = list(model.state_dict().keys())
        with torch.no_grad():
            self.average = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self._hooks: list[RemovableHandle] = []
        self._saved: dict[str, torch.Tensor] | None = None  # the model's own weights while the average is swapped in

    def _pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
        live = self.model.state_dict()
        floats_avg, floats_live, others = [], [], []
        for k in self._names:
            a, w = self.average[k], live[k]
            if a.is_floating_point():
                floats_avg.append(a)
                floats_live.append(w.detach())
            else:
                others.append((a, w))
        return floats_avg, floats_live, others

    @torch.no_grad()
    def update(self) -> None:
        avg, live, others = self._pairs()
        if avg:
            torch._foreach_lerp_(avg, live, 1.0 - self.decay)
        for a, w in others:
            a.copy_(w)
        self.updates += 1

    def follow(self, optimizers: Iterable[torch.optim.Optimizer]) -> None:
        """Update after every step of these optimizers (torch's step post-hooks)."""
        for opt in optimizers:
            self._hooks.append(opt.register_step_post_hook(lambda *_: self.update()))

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The model holds the averaged weights inside the block, its own again after it."""
        live = self.model.state_dict()
        if self._saved is not None:  # already in
            yield
            return
        with torch.no_grad():
            saved = {k: live[k].detach().clone() for k in self._names}
            for k in self._names:
                live[k].copy_(self.average[k])
        self._saved = saved
        try:
            yield
        finally:
            with torch.no_grad():
                for k in self._names:
                    live[k].copy_(saved[k])
            self._saved = None

    def model_state(self) -> dict[str, Any]:
        """The model's own state_dict, also while the average is swapped in (a checkpoint in validation)."""
        live = self.model.state_dict()
        return {k: self._saved.get(k, v) for k, v in live.items()} if self._saved is not None else live

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "updates": self.updates, "average": dict(self.average)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for k, v in state["average"].items():
                if k in self.average:
                    self.average[k].copy_(v)
        self.updates = int(state.get("updates", 0))
