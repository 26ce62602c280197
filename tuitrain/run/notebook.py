"""The dashboard inline in a Jupyter notebook: no server, no port, no extension.

`NotebookView(run_dir)` draws the run in one updating output of the cell (or another tool's run a folder
holds: TensorBoard, Lightning, MLflow ..., found as `tuitrain watch` finds it): `tuitrain watch RUN_DIR
--frames FILE` in a process of its own renders the same dashboard as the terminal's, headless, to an
SVG picture about once a second (tuitrain/dashboard/frames.py); a daemon thread of the kernel puts each
new picture in one display (`display_id`, updated in place: not a growing list of outputs). The picture
is drawn in another process, so the training in the kernel shares no interpreter lock with the drawing.
When the run ends, the last picture (the charts, the progress panel's final state, the checkpoints)
stays in the cell, which a saved notebook shows without a kernel. It is kept as an `<img>` whose source is
the SVG as a data URL, in a `text/html` output (`picture_bundle`): JupyterLab and Notebook 7 do not draw an
`image/svg+xml` output of a notebook opened untrusted (a colleague's, a download), but they do draw that.

The drawing process runs in a session of its own: JupyterLab's interrupt is a SIGINT to the kernel's whole
process group, which would end the drawing before its last picture (issue 51).

The kernel's interrupt (the stop button, SIGINT) is the run's graceful stop: `Learner.fit` and `Monitor`
hold `StopOnSignals` while they train. With `controls` (the run's Interrupter) and ipywidgets installed,
Stop, Pause and Checkpoint buttons sit under the picture. A click reaches the kernel only while the cell
leaves the kernel's event loop free: `await learner.fit_async(...)` (ipykernel 7 hands a widget's messages
to an awaiting cell); under a blocking `fit` they would be dead, so they are not shown there. When the run
ends they are taken away: a saved notebook keeps the picture, not buttons without a kernel.
Must not import textual (the drawing process does).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tuitrain.run.signals import die_with_parent

#: the picture's size in terminal cells: what fits a notebook's width at a readable size
SIZE = (120, 40)
#: seconds between looks at the picture's file
POLL = 0.25
#: seconds the drawing process gets to draw the last picture after the run ended
LAST_PICTURE = 30.0


class NotebookView:
    """`run_dir`'s dashboard in this cell's output, from `open()` to `close()`."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        theme: str | os.PathLike | None = None,
        size: tuple[int, int] = SIZE,
        controls=None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.controls = controls  # the run's Interrupter, for the buttons
        self.buttons = None  # the buttons' display, while they are shown
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

    def open(self) -> NotebookView:
        from IPython.display import HTML, display

        self.handle = display(HTML("<pre>tuitrain: the dashboard is starting…</pre>"), display_id=True)
        cmd = [
            sys.executable,
            "-m",
            "tuitrain",
            "watch",
            str(self.run_dir),
            "--frames",
            str(self.picture),
            "--size",
            f"{self.size[0]}x{self.size[1]}",
        ]
        if self.theme:
            cmd += ["--theme", str(self.theme)]
        log = open(self._folder / "frames.log", "wb")
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, "TERM": "xterm-256color"},
            start_new_session=True,  # the kernel's interrupt is not for it
            preexec_fn=die_with_parent(),
        )  # a kernel restarted takes it along
        log.close()
        self._thread = threading.Thread(target=self._follow, name="tuitrain-notebook", daemon=True)
        self._thread.start()
        if self.controls is not None:
            self.buttons = show_buttons(self.controls)
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
        self._seen = seen
        self.handle.update(picture_bundle(svg, f"tuitrain: the dashboard of {self.run_dir}"), raw=True)
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
        if self.buttons is not None:  # no buttons without a run to act on (nor in the saved notebook)
            from IPython.display import HTML

            self.buttons.update(HTML(""))
            self.buttons = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.show_newest()
        if not self.shown and self.handle is not None:  # nothing drawn: say where the run is instead
            from IPython.display import HTML

            why = (
                (self._folder / "frames.log").read_text(errors="replace")[-2000:]
                if (self._folder / "frames.log").exists()
                else ""
            )
            self.handle.update(
                HTML(
                    f"<pre>tuitrain: no picture of the run was drawn; its files are in "
                    f"{self.run_dir}\n{_escape(why)}</pre>"
                )
            )
        shutil.rmtree(self._folder, ignore_errors=True)  # the picture is in the notebook now

    def __enter__(self) -> NotebookView:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def picture_bundle(svg: str, alt: str) -> dict[str, str]:
    """The picture as a display's data: an `<img>` of the SVG as a base64 data URL in `text/html` (drawn in
    an untrusted notebook too: JupyterLab's sanitizer keeps an image's data URL; an `image/svg+xml` output
    it leaves out), at the SVG's own width and never wider than the cell; `alt` for text-only front ends."""
    found = re.search(r'viewBox="0 0 ([\d.]+) ', svg[:1000])
    width = f' width="{round(float(found.group(1)))}"' if found else ""
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    said = _escape(alt).replace('"', "&quot;")
    return {
        "text/plain": alt,
        "text/html": f'<img src="data:image/svg+xml;base64,{data}" alt="{said}"{width} '
        f'style="max-width: 100%; height: auto">',
    }


def show_buttons(controls):
    """Stop, Pause (Resume while paused) and Checkpoint buttons acting on `controls` (an Interrupter), in a
    display of their own; None without ipywidgets or under an ipykernel older than 7.4."""
    try:
        import ipykernel
        import ipywidgets as widgets
    except ImportError:
        return None
    if tuple(ipykernel.version_info[:2]) < (7, 4):  # the clicks would wait for the cell to end
        return None
    from IPython.display import display

    stop = widgets.Button(description="Stop", icon="stop", tooltip="stop gracefully, with a checkpoint")
    pause = widgets.Button(description="Pause", icon="pause", tooltip="pause at the next step; again to resume")
    checkpoint = widgets.Button(description="Checkpoint", icon="save", tooltip="save a checkpoint at the next step")

    def on_stop(_) -> None:
        controls.request_stop("notebook")
        for button in (stop, pause, checkpoint):
            button.disabled = True
        stop.description = "Stopping…"

    def on_pause(_) -> None:
        controls.toggle_pause("notebook")
        pause.description, pause.icon = ("Resume", "play") if controls.paused else ("Pause", "pause")

    stop.on_click(on_stop)
    pause.on_click(on_pause)
    checkpoint.on_click(lambda _: controls.request_checkpoint("notebook"))
    return display(widgets.HBox([stop, pause, checkpoint]), display_id=True)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
