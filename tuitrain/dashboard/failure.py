"""What a screen that failed leaves behind: its error in one line (`head`) and its traceback in a file of
its own (`traceback_file`), so that nothing but that line lands on the terminal. Used by the viewers
(entry.py `viewed`) and by a live run's screen that fails after training ended (live.py)."""

from __future__ import annotations

import tempfile
import traceback


def head(error: BaseException) -> str:
    """ "RuntimeError: what it said", on one line, at most 200 characters."""
    return f"{type(error).__name__}: {error}".splitlines()[0][:200]


def traceback_file(error: BaseException) -> str:
    """The traceback written to a file of its own: "; the traceback is in PATH" (nothing when it cannot be
    written)."""
    try:
        fd, path = tempfile.mkstemp(prefix="tuitrain-dashboard-", suffix=".log")
        with open(fd, "w", encoding="utf-8") as f:
            f.write("".join(traceback.format_exception(error)))
    except OSError:
        return ""
    return f"; the traceback is in {path}"


__all__ = ["head", "traceback_file"]
