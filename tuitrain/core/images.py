"""Images for the media log (media.py): what `log_image` is given, copied on the caller's thread
(`take_image`, `take_copy`: a CPU clone, or from a GPU a non-blocking copy into pinned memory), then on
the media worker laid out as one RGB image (`image_of`: a batch as a grid, at most `MAX_SIDE` pixels on a
side) and encoded as PNG (png.py: zlib alone, no imaging library). Must not import textual.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .png import encode_png

MAX_SIDE = 512  #: an image's longest side in pixels, once written
GRID_PAD = 2  #: pixels between the images of a grid


def is_numpy(x: Any) -> bool:
    return type(x).__module__ == "numpy" and hasattr(x, "shape")


def _is_pil(x: Any) -> bool:
    return hasattr(x, "convert") and hasattr(x, "size") and hasattr(x, "tobytes")


class _Copy:
    """A tensor taken off the loop's thread: the CPU copy and, from a GPU, the event to wait for."""

    __slots__ = ("channels_last", "ready", "tensor")

    def __init__(self, tensor: torch.Tensor, ready: Any = None, channels_last: bool = False) -> None:
        self.tensor, self.ready, self.channels_last = tensor, ready, channels_last

    def get(self) -> torch.Tensor:
        if self.ready is not None:
            self.ready.synchronize()
        return self.tensor


def take_copy(t: torch.Tensor) -> _Copy:
    """A copy of `t` the caller may change at once: on the CPU a clone; from a GPU a non-blocking
    copy into pinned memory, waited for by whoever reads it."""
    t = t.detach()
    if t.device.type == "cpu":
        return _Copy(t.clone())
    if t.device.type == "cuda":
        out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        out.copy_(t, non_blocking=True)
        ready = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch's Event.__init__ is unannotated
        ready.record()
        return _Copy(out, ready)
    return _Copy(t.to("cpu"))


def take_image(images: Any) -> _Copy:
    """What `log_image` was given, copied on the caller's thread: a tensor (C,H,W) or (N,C,H,W), a
    numpy array (H,W) or (H,W,C) or (N,H,W,C), a PIL image, or a list of any of them."""
    if isinstance(images, torch.Tensor):
        return take_copy(images)
    if is_numpy(images):
        return _Copy(torch.from_numpy(images.copy()), channels_last=images.ndim >= 3 or images.ndim == 2)
    if _is_pil(images):
        img = images.convert("RGB")
        w, h = img.size
        data = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).reshape(h, w, 3)
        return _Copy(data, channels_last=True)
    if isinstance(images, (list, tuple)) and images:
        parts = [take_image(x) for x in images]
        return _Copy(parts, channels_last=False)  # type: ignore[arg-type]  # a list: each laid out alone
    raise TypeError(
        "log_image takes a tensor (C,H,W) or (N,C,H,W), a numpy array (H,W), (H,W,C) or "
        f"(N,H,W,C), a PIL image, or a list of them; not {type(images).__name__}"
    )


def check_image(copy: _Copy) -> _Copy:
    """`copy` if its shape is an image's or a batch's (looked at on the caller's thread, so a wrong one
    is a ValueError where it was logged); reading its pixels waits for the worker."""
    for part in copy.tensor if isinstance(copy.tensor, list) else (copy,):
        if isinstance(part.tensor, list):
            check_image(part)
            continue
        chw = _as_chw(part.tensor, part.channels_last)
        if 0 in chw.shape:
            raise ValueError(f"log_image: an image of shape {tuple(part.tensor.shape)} has no pixels")
    return copy


def _as_chw(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """One image as (C,H,W) with C in 1, 3 or 4, or a batch as (N,C,H,W)."""
    if t.ndim == 2:
        return t.unsqueeze(0)
    if t.ndim == 3:
        if channels_last or (t.shape[0] not in (1, 3, 4) and t.shape[-1] in (1, 3, 4)):
            t = t.permute(2, 0, 1)
        if t.shape[0] not in (1, 3, 4):
            raise ValueError(
                f"log_image: an image of shape {tuple(t.shape)} has {t.shape[0]} channels (1, 3 or 4 expected)"
            )
        return t
    if t.ndim == 4:
        if channels_last or (t.shape[1] not in (1, 3, 4) and t.shape[-1] in (1, 3, 4)):
            t = t.permute(0, 3, 1, 2)
        if t.shape[1] not in (1, 3, 4):
            raise ValueError(
                f"log_image: images of shape {tuple(t.shape)} have {t.shape[1]} channels (1, 3 or 4 expected)"
            )
        return t
    raise ValueError(f"log_image: a tensor of shape {tuple(t.shape)} is no image ((C,H,W) or (N,C,H,W))")


def to_uint8(t: torch.Tensor) -> torch.Tensor:
    """Floats in [0, 1] (clamped; NaN as 0) or integers in [0, 255], as uint8."""
    if t.dtype == torch.uint8:
        return t
    if t.is_floating_point():
        return (torch.nan_to_num(t.float(), 0.0, 1.0, 0.0).clamp(0, 1) * 255).round().to(torch.uint8)
    if t.dtype == torch.bool:
        return t.to(torch.uint8) * 255
    return t.clamp(0, 255).to(torch.uint8)


def _rgb(images: torch.Tensor) -> torch.Tensor:
    """(C,H,W) or (N,C,H,W) uint8 with C in 1, 3, 4 as RGB: grey repeated, alpha dropped (over black)."""
    c = images.shape[-3]
    if c == 1:
        return images.expand(*images.shape[:-3], 3, *images.shape[-2:])
    if c == 4:
        alpha = images[..., 3:4, :, :].float() / 255
        return (images[..., :3, :, :].float() * alpha).round().to(torch.uint8)
    return images


def shrink(img: torch.Tensor, max_side: int = MAX_SIDE) -> torch.Tensor:
    """(3,H,W) uint8 no larger than `max_side` on a side (area averaging keeps its look)."""
    h, w = img.shape[1], img.shape[2]
    if max(h, w) <= max_side:
        return img
    scale = max_side / max(h, w)
    size = (max(1, round(h * scale)), max(1, round(w * scale)))
    small = torch.nn.functional.interpolate(img.unsqueeze(0).float(), size=size, mode="area")
    return small[0].round().clamp(0, 255).to(torch.uint8)


def image_of(copy: _Copy) -> torch.Tensor:
    """What `take_image` copied, as one (3,H,W) uint8 image (a batch as a grid), at most MAX_SIDE."""
    parts = copy.tensor if isinstance(copy.tensor, list) else [copy]
    images: list[Any] = []  # (3,H,W) uint8 each
    for part in parts:
        chw = _as_chw(part.get(), part.channels_last)
        if 0 in chw.shape:
            raise ValueError(f"log_image: an image of shape {tuple(chw.shape)} has no pixels")
        images.extend(_rgb(to_uint8(chw)) if chw.ndim == 4 else [_rgb(to_uint8(chw))])
    return shrink(images[0].contiguous() if len(images) == 1 else grid(images))


def grid(images: list[torch.Tensor], pad: int = GRID_PAD) -> torch.Tensor:
    """(3,H,W) uint8 images as one grid, about as many columns as rows, `pad` pixels apart, each
    top-left in a cell of the largest one's size; a few whole-tensor operations, not one per image."""
    n = len(images)
    h = max(i.shape[1] for i in images)
    w = max(i.shape[2] for i in images)
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    full = torch.zeros(rows * cols, 3, h + pad, w + pad, dtype=torch.uint8)
    if all(i.shape[1:] == (h, w) for i in images):
        full[:n, :, :h, :w] = torch.stack(images)
    else:
        for k, img in enumerate(images):
            full[k, :, : img.shape[1], : img.shape[2]] = img
    out = (
        full.reshape(rows, cols, 3, h + pad, w + pad)
        .permute(2, 0, 3, 1, 4)
        .reshape(3, rows * (h + pad), cols * (w + pad))
    )
    return out[:, : rows * (h + pad) - pad, : cols * (w + pad) - pad].contiguous()


def png_bytes(img: torch.Tensor) -> bytes:
    """(3,H,W) uint8 as a PNG file's bytes (8-bit RGB, no filter)."""
    h, w = img.shape[1], img.shape[2]
    rows = img.permute(1, 2, 0).contiguous().reshape(h, w * 3)
    filtered = torch.cat([torch.zeros(h, 1, dtype=torch.uint8), rows], dim=1)  # filter 0 on each row
    raw = filtered.numpy().tobytes()  # numpy: a dependency of tuitrain's
    return encode_png(w, h, raw)
