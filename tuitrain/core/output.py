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
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TextIO

from .events import Event, OutputPrinted
from .text import collapse_redraws


PARTIAL_INTERVAL = 0.25  # seconds between two partial lines of one stream (a bar redraws faster)
MAX_LINE = 64 * 1024  # characters a line may gather without a newline before it is sent as a line


class LineWriter(io.TextIOBase):
    """A text stream that emits whole lines as events. A line not ended yet waits for its newline;
    flushed (tqdm, print(end="", flush=True)) it is sent as it stands, marked partial, at most every
    PARTIAL_INTERVAL seconds: a progress bar redrawn with `\\r` is one line that updates."""

    def __init__(
        self, emit: Callable[[Event], None], stream: str, original: TextIO, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._emit = emit
        self._stream = stream
        self._buf = ""
        self._lock = threading.Lock()
        self.original = original
        self._busy = threading.local()
        self._clock = clock
        self._shown = ""  # the partial line last sent
        self._shown_at = -PARTIAL_INTERVAL

    def writable(self) -> bool:
        return True

    @property
    # typeshed has TextIOBase.encoding as an attribute; CPython's is a read-only property, as this one
    def encoding(self) -> str:  # type: ignore[override]  # some libraries ask
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
            if "\n" in self._buf:
                lines, self._buf = self._buf.rsplit("\n", 1)
                self._shown = ""
            else:
                if "\r" in text:  # only a redraw's newest state is kept: memory stays bounded
                    self._buf = _newest(self._buf)
                if len(self._buf) <= MAX_LINE:
                    return len(text)
                lines, self._buf, self._shown = self._buf, "", ""
        self._send(collapse_redraws(lines))
        return len(text)

    def _send(self, text: str, partial: bool = False) -> None:
        self._busy.on = True
        try:
            self._emit(OutputPrinted(text=text, stream=self._stream, partial=partial))
        finally:
            self._busy.on = False

    def flush(self) -> None:
        """The line under way, shown as it stands (partial), when it changed and its time came."""
        with self._lock:
            line = collapse_redraws(self._buf)
            now = self._clock()
            if not line or line == self._shown or now - self._shown_at < PARTIAL_INTERVAL:
                return
            self._shown, self._shown_at = line, now
        self._send(line, partial=True)

    def finish(self) -> None:
        """The capture ends: a line left without its newline is sent as a whole line."""
        with self._lock:
            rest, self._buf, self._shown = self._buf, "", ""
        rest = collapse_redraws(rest)
        if rest:
            self._send(rest)


def _newest(buf: str) -> str:
    """A line being redrawn with \\r, down to its newest state (and the \\r after it, if any)."""
    head, _, tail = buf.rpartition("\r")
    if tail:
        return "\r" + tail
    newest = head.rpartition("\r")[2]
    return "\r" + newest + "\r" if newest else "\r"


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
def capture_output(emit: Callable[[Event], None]) -> Iterator[None]:
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

            def show(
                message: Warning | str,
                category: type[Warning],
                filename: str,
                lineno: int,
                file: TextIO | None = None,
                line: str | None = None,
            ) -> None:
                err.write(warnings.formatwarning(message, category, filename, lineno, line))

            warnings.showwarning = show
            yield
    finally:
        out.finish()
        err.finish()
        sys.stdout, sys.stderr = saved
        root.removeHandler(handler)
        root.setLevel(saved_level)
