"""What a batch is made of, for the loops and the default step: its size and tokens, a mapping batch's
default step (`model(**batch)`), moving it to the device. Must not import textual."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .state import StepOutput


def batch_size_of(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, (list, tuple)) and batch:
        return batch_size_of(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_size_of(next(iter(batch.values())))
    return 1


def tokens_of(batch: Any) -> int:
    """A batch's tokens, for throughput in tokens: the elements of its labels, targets or input ids."""
    if isinstance(batch, Mapping):
        for key in ("labels", "input_ids"):
            if isinstance(batch.get(key), torch.Tensor):
                return int(batch[key].numel())
    if isinstance(batch, (list, tuple)) and len(batch) == 2 and isinstance(batch[1], torch.Tensor):
        return batch[1].numel()
    if isinstance(batch, torch.Tensor):
        return batch.numel()
    return batch_size_of(batch)


def _field(obj: Any, name: str) -> Any:
    """`obj.name` or `obj[name]` (a dataclass, a dict, a Hugging Face ModelOutput), None when absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def mapping_step(model: Any, batch: Mapping[str, Any], loss_fn: Any = None) -> StepOutput:
    """The default step for a mapping batch: `model(**batch)`; the loss is the output's `loss`
    (attribute or key), else `loss_fn(logits, labels)`; accuracy-like metrics read `logits` and
    `labels`."""
    out = model(**batch)
    logits = _field(out, "logits")
    if logits is None and isinstance(out, torch.Tensor):
        logits = out
    labels = batch.get("labels", batch.get("label"))
    loss = _field(out, "loss") if not isinstance(out, torch.Tensor) else None
    if loss is None:
        if loss_fn is None or logits is None or labels is None:
            raise ValueError(
                f"model(**batch) returned {type(out).__name__} without a 'loss': return one (a "
                "Hugging Face model does when the batch has 'labels'), or return 'logits' with "
                "'labels' in the batch for the [loss] target"
            )
        loss = loss_fn(logits, labels)
    return StepOutput(loss=loss, output=logits, target=labels)


def move_to(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        moved = [move_to(b, device, non_blocking) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, dict):
        return {k: move_to(v, device, non_blocking) for k, v in batch.items()}
    return batch
