"""This process's stdout and stderr into a file, and back: the file descriptors 1 and 2 themselves, so
that what a library's C code or a child process writes goes there too. A `Monitor`'s dashboard
(viewer.py: the loop's output to RUN_DIR/output.log while the screen is up) and its ranks other than 0
under a dashboard (RUN_DIR/ranks/rank-N.log) use it. Must not import textual.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


class Redirect:
    """`to(path)` sends fds 1 and 2 to `path` (appended to), keeping the originals in `saved` (a child
    process can be given them: the terminal); `back()` restores them. Each flushes Python's streams first."""

    def __init__(self) -> None:
        self.saved: tuple[int, int] | None = None

    def to(self, path: Path) -> Redirect:
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        raw = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(raw, 1)
        os.dup2(raw, 2)
        os.close(raw)
        return self

    def back(self) -> None:
        """fds 1 and 2 as they were (nothing when not redirected)."""
        if self.saved is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        self.saved = None
