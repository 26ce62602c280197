"""The dashboard of a run drawn as SVG pictures, for a screen that is not a terminal (a Jupyter notebook):
`FramesApp` is the same app as `tuitrain watch` shows, run headless at a fixed size, writing its screen
(Textual's own `export_screenshot`, what the `e` key exports) to one file about once a second. Once the
run has ended and its result is on the screen, it writes the last picture and leaves.

The file is replaced atomically (a reader never sees half a picture); nothing is steered from here (the
notebook steers through the run's own interrupter). Like the rest of the dashboard, this module must not
import the run layer.
"""

from __future__ import annotations

import os
from pathlib import Path

from tuitrain.core.fsutil import atomic_write_text
from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.state.feed import Feed
from tuitrain.dashboard.small_svg import smaller
from tuitrain.sources import registry
from tuitrain.sources.run_files import FileSource, Source
from tuitrain.sinks.run_status import process_gone

#: seconds between pictures
EVERY = 1.0
#: how much lower the drawing process's CPU priority is than the training's
NICE = 10
#: seconds the result screen gets to be drawn before the last picture
SETTLE = 0.6


class FramesApp(DashboardApp):
    """`tuitrain watch RUN_DIR`, headless, drawing itself to `out` every `every` seconds. No keys reach
    it: the footer's list of them is left out, and at the end the dashboard stays (its charts, the
    progress panel's final state, the checkpoints), not the result screen over it."""

    CSS = "Footer { display: none; }"

    def __init__(
        self,
        run_dir: Path,
        out: Path,
        theme: Path | None = None,
        every: float = EVERY,
        live: bool = True,
        source: Source | None = None,
    ) -> None:
        # owned: the run is the one this picture is drawn for (its title says live, not "watching")
        # one wake-up a second: the events read, the panels redrawn and the picture taken together (a
        # terminal's 15 drains a second answer keys; here each wake-up takes a core from the training)
        # `source`: another tool's run (its reader's, tuitrain/sources/registry.py), in place of RUN_DIR's files
        if source is None:
            source = FileSource(Path(run_dir), live=live)
        super().__init__(source, None, theme, watch=True, owned=True, drain_interval=every)
        self.out = Path(out)
        self.run_dir = Path(run_dir)
        self._leaving = False
        self.every = every
        self.pictures = 0

    async def on_mount(self) -> None:  # (DashboardApp's own on_mount runs too: Textual calls both)
        self.set_interval(self.every, self.picture)

    def picture(self) -> None:
        # a third of the size, drawn the same: a notebook keeps one in each cell that trained
        atomic_write_text(self.out, smaller(self.export_screenshot(title=self.state.experiment or "tuitrain")))
        self.pictures += 1
        if process_gone(self.run_dir) and not self._leaving:  # the run's process died without its end
            self._leaving = True
            self.set_timer(SETTLE, self.last_picture)

    def on_feed_settled(self, message: Feed.Settled) -> None:
        """The run ended and the source is read to its end: the last picture once it is drawn, and leave
        (the result screen is not put over the charts: `prevent_default` keeps DashboardApp's handler out)."""
        message.prevent_default()
        if not self._leaving:
            self._leaving = True
            self.set_timer(SETTLE, self.last_picture)

    def last_picture(self) -> None:
        self.picture()
        self.exit(0)


def yield_to_training() -> None:
    """The picture yields to the training it shows (a lower priority: on a busy machine the picture waits,
    not the steps). Not SCHED_IDLE: a training that keeps every core busy starved it to a picture every
    5-8 seconds (benchmarks/RESULTS.md)."""
    try:
        os.nice(NICE)
    except OSError:
        pass


def run_frames(
    run_dir: Path, out: Path, theme: Path | None = None, size: tuple[int, int] = (120, 40), every: float = EVERY
) -> int:
    """Draw `run_dir`'s dashboard to `out` until the run has ended (see `FramesApp`); 0. A run not
    started yet (no run.json) counts as live: a notebook starts the pictures before its run. A path that
    holds another tool's run (and no run of tuitrain's) draws the first such run its readers find."""
    from tuitrain.sinks.run_status import live_status

    found = registry.find([run_dir]).runs if Path(run_dir).exists() else []  # (none yet: tuitrain's, to come)
    source = registry.open_source(found[0]) if found and not registry.is_own(found[0]) else None
    live = live_status(Path(run_dir)) in ("running", "unknown") if source is None else source.live
    yield_to_training()
    FramesApp(run_dir, out, theme, every, live=live, source=source).run(headless=True, size=size)
    return 0
