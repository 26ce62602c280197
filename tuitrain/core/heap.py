"""Freed memory kept in the process while training (Linux with glibc).

With glibc's defaults, a training step's large blocks (activations, gradients, a batch: anything
over 128 KB, and then up to 32 MB as the threshold adapts) go back to the kernel when freed, and the
next step takes them again page by page: the kernel zeroes each page on first touch. A CPU step of a
784-1024-10 MLP at batch 128 took ~1000-2000 page faults and ~10 % of its time doing so. With the
trim and mmap thresholds raised, freed blocks stay in the process for the next step. The same holds
for PyTorch's CUDA caching allocator, which keeps what it freed for the same reason.

Left alone when the user set glibc's own knobs (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_ or
GLIBC_TUNABLES), and everywhere mallopt does not exist (macOS, Windows, musl).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Literal

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 512 << 20  # free memory kept at the top of the heap
MMAP_THRESHOLD = 32 << 20  # blocks above this still get their own mapping (glibc's own maximum)
USER_KNOBS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")

_libc: ctypes.CDLL | Literal[False] | None = None  # False: no glibc here
_kept = False


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL("libc.so.6")
            lib.mallopt, lib.malloc_trim  # noqa: B018 (glibc has both)
        except (OSError, AttributeError):
            _libc = False
        else:
            _libc = lib
    return _libc or None


def keep_freed_memory() -> bool:
    """Raise glibc's thresholds for the rest of the process (once); True when they are raised."""
    global _kept
    if _kept:
        return True
    if not sys.platform.startswith("linux") or any(k in os.environ for k in USER_KNOBS):
        return False
    libc = _glibc()
    if libc is None:
        return False
    # mmap first: setting either turns glibc's adaptive threshold off
    _kept = bool(
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    )
    return _kept


def release_freed_memory() -> None:
    """Give what is free back to the kernel now (the end of training)."""
    libc = _glibc() if _kept else None
    if libc is not None:
        libc.malloc_trim(0)
