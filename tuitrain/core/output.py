"""Captures what the user's code prints or logs during a run and turns it into OutputPrinted events.

sys.stdout/sys.stderr are replaced by line-buffered writers for the run (any thread), and a handler on
the root logger forwards log records. Must not import torch or textual.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import warnings
from typing import Callable

from .events import Event, OutputPrinted


class LineWriter(io.TextIOBase):
    """A text stream that emits whole lines as events; a partial line waits for its newline."""

    def __init__(self, emit: Callable[[Event], None], stream: str, original) -> None:
        self._emit = emit
        self._stream = stream
        self._buf = ""
        self._lock = threading.Lock()
        self.original = original
        self._busy = threading.local()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):  # some libraries ask
        return getattr(self.original, "encoding", "utf-8")

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            text = str(text)
        if getattr(self._busy, "on", False):  # a sink printing while handling an event: no loop
            return len(text)
        with self._lock:
            self._buf += text
            if "\n" not in self._buf:
                return len(text)
            lines, self._buf = self._buf.rsplit("\n", 1)
        self._send(lines)
        return len(text)

    def _send(self, text: str) -> None:
        self._busy.on = True
        try:
            self._emit(OutputPrinted(text=text.replace("\r", ""), stream=self._stream))
        finally:
            self._busy.on = False

    def flush(self) -> None:
        with self._lock:
            rest, self._buf = self._buf, ""
        if rest:
            self._send(rest)


class _Handler(logging.Handler):
    def __init__(self, emit: Callable[[Event], None]) -> None:
        super().__init__()
        self._emit = emit
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._emit(OutputPrinted(text=self.format(record), stream="log"))
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def capture_output(emit: Callable[[Event], None]):
    """Route print(), warnings and logging to `emit` while the block runs."""
    out = LineWriter(emit, "stdout", sys.stdout)
    err = LineWriter(emit, "stderr", sys.stderr)
    saved = sys.stdout, sys.stderr
    root = logging.getLogger()
    handler = _Handler(emit)
    saved_level = root.level
    if not root.handlers and root.level == logging.WARNING:
        root.setLevel(logging.INFO)  # an unconfigured root would drop the user's logger.info
    root.addHandler(handler)
    sys.stdout, sys.stderr = out, err
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = lambda msg, cat, fn, ln, file=None, line=None: err.write(
                warnings.formatwarning(msg, cat, fn, ln, line))
            yield
    finally:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = saved
        root.removeHandler(handler)
        root.setLevel(saved_level)
