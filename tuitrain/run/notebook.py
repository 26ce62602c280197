"""The dashboard inline in a Jupyter notebook: no server, no port, no extension.

`NotebookView(run_dir)` draws the run in one updating output of the cell: `tuitrain watch RUN_DIR
--frames FILE` in a process of its own renders the same dashboard as the terminal's, headless, to an
SVG picture about once a second (tuitrain/dashboard/frames.py); a daemon thread of the kernel puts each
new picture in one display (`display_id`, updated in place: not a growing list of outputs). The picture
is drawn in another process, so the training in the kernel shares no interpreter lock with the drawing.
When the run ends, the last picture (the charts, the progress panel's final state, the checkpoints)
stays in the cell as an `image/svg+xml` output, which a saved notebook shows without a kernel (Jupyter,
VS Code, GitHub's viewer).

The kernel's interrupt (the stop button, SIGINT) is the run's graceful stop: `Learner.fit` and `Monitor`
hold `StopOnSignals` while they train. Must not import textual (the drawing process does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: the picture's size in terminal cells: what fits a notebook's width at a readable size
SIZE = (120, 40)
#: seconds between looks at the picture's file
POLL = 0.25
#: seconds the drawing process gets to draw the last picture after the run ended
LAST_PICTURE = 30.0


class NotebookView:
    """`run_dir`'s dashboard in this cell's output, from `open()` to `close()`."""

    def __init__(self, run_dir: str | os.PathLike, theme: str | os.PathLike | None = None,
                 size: tuple[int, int] = SIZE) -> None:
        self.run_dir = Path(run_dir)
        self.theme = theme
        self.size = size
        self.handle = None
        self.shown = 0  # pictures put in the display
        self._folder = Path(tempfile.mkdtemp(prefix="tuitrain-notebook-"))
        self.picture = self._folder / "dashboard.svg"
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._seen = None  # the picture file's (mtime, size) last shown

    def open(self) -> "NotebookView":
        from IPython.display import HTML, display

        self.handle = display(HTML("<pre>tuitrain: the dashboard is starting…</pre>"), display_id=True)
        cmd = [sys.executable, "-m", "tuitrain", "watch", str(self.run_dir), "--frames", str(self.picture),
               "--size", f"{self.size[0]}x{self.size[1]}"]
        if self.theme:
            cmd += ["--theme", str(self.theme)]
        log = open(self._folder / "frames.log", "wb")
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      env={**os.environ, "TERM": "xterm-256color"})
        log.close()
        self._thread = threading.Thread(target=self._follow, name="tuitrain-notebook", daemon=True)
        self._thread.start()
        return self

    def _follow(self) -> None:
        while not self._stop.wait(POLL):
            self.show_newest()

    def show_newest(self) -> bool:
        """Put the picture in the display when it changed since the last look; True when it did."""
        try:
            st = self.picture.stat()
            seen = (st.st_mtime_ns, st.st_size)
            if seen == self._seen:
                return False
            svg = self.picture.read_text(encoding="utf-8")
        except OSError:
            return False
        from IPython.display import SVG

        self._seen = seen
        self.handle.update(SVG(data=svg))
        self.shown += 1
        return True

    def close(self, timeout: float = LAST_PICTURE) -> None:
        """The run has ended: wait for the drawing's last picture (it leaves once drawn), show it."""
        proc = self._proc
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.show_newest()
        if not self.shown and self.handle is not None:  # nothing drawn: say where the run is instead
            from IPython.display import HTML

            why = (self._folder / "frames.log").read_text(errors="replace")[-2000:] if (
                self._folder / "frames.log").exists() else ""
            self.handle.update(HTML(f"<pre>tuitrain: no picture of the run was drawn; its files are in "
                                    f"{self.run_dir}\n{_escape(why)}</pre>"))
        shutil.rmtree(self._folder, ignore_errors=True)  # the picture is in the notebook now

    def __enter__(self) -> "NotebookView":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

