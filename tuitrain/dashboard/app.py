"""The Textual dashboard: `DashboardApp`, and the entry points the CLI calls, `run_live` (train in
this process under the dashboard) and `run_watch` (follow a run directory's events.jsonl).

The app never calls into the training loop: events arrive through an `EventBridge` drained on a
timer, and keys act through a `Controller` (the run's `Interrupter`, or `FileControl` for a run
in another process).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.theme import Theme
from textual.timer import Timer
from textual.widgets import Footer, Static

from tuitrain.core.control import Controller, FileControl
from tuitrain.dashboard.bridge import EventBridge
from tuitrain.dashboard.messages import TrainingEnded
from tuitrain.dashboard.model import DashboardState
from tuitrain.dashboard.sources import FileSource, RunSource, Source
from tuitrain.dashboard.widgets.checkpoint_list import CheckpointList
from tuitrain.dashboard.widgets.confirm_screen import ConfirmScreen
from tuitrain.dashboard.widgets.control_bar import ControlBar
from tuitrain.dashboard.widgets.devices_panel import DevicesPanel
from tuitrain.dashboard.widgets.help_screen import HelpScreen
from tuitrain.dashboard.widgets.metric_plot import MetricPlot
from tuitrain.dashboard.widgets.output_log import OutputLog
from tuitrain.dashboard.widgets.progress_panel import ProgressPanel
from tuitrain.dashboard.widgets.result_screen import ResultScreen, result_body, result_title

DASHBOARD_TCSS = Path(__file__).with_name("dashboard.tcss")
COMPACT = (100, 32)  # below this width or height the side panels shrink
TOO_SMALL = (50, 12)  # below this the dashboard gives way to a notice
PROGRESS_INTERVAL = 0.5  # seconds between progress-panel refreshes while only counters move
# Redraws run on the UI thread and hold the GIL that the training thread needs: while training runs,
# the screen may use this share of one core. When it uses more, refreshes of the plot and the
# counters are spread out (up to MAX_SLOW times their interval); paused or ended, they are not.
UI_SHARE = 0.025
PACE_WINDOW = 2.0  # seconds over which the UI thread's CPU time is measured
MAX_SLOW = 4.0
# The plot is the costliest redraw (plotext builds a figure in 20-60 ms): while training runs, the
# next one waits until the last one's cost is at most this share of the time since.
PLOT_SHARE = 0.015
# While training runs in this process the screen wakes less often: each wake takes the GIL from the
# training thread (a forced switch, and Textual's message loop takes it several times over), and
# the bus hands the frequent events over every 0.25 s anyway. Paused, ended or watching: 1/15 s.
BUSY_DRAIN_INTERVAL = 0.25
DRAIN_LIMIT = 5000  # events folded per tick (~40 ms): a long events.jsonl loads without freezing keys

# a theme file may name the Textual base theme (buttons, footer, dialogs) in a comment
_BASE_THEME = re.compile(r"textual-theme:\s*([A-Za-z0-9_-]+)")

HIGH_CONTRAST = Theme(
    name="tuitrain-high-contrast", primary="#ffff00", secondary="#00ffff", accent="#ff00ff",
    foreground="#ffffff", background="#000000", surface="#000000", panel="#000000",
    success="#00ff00", warning="#ffff00", error="#ff0000", dark=True,
)


def default_theme() -> Path | None:
    try:
        from tuitrain.dashboard.themes import find_theme
    except ImportError:
        find_theme = None
    if find_theme is not None:
        found = find_theme("dark")
        if found is not None:
            return found
    for folder in (Path(__file__).resolve().parents[2] / "themes", Path(__file__).resolve().parents[1] / "themes"):
        if (folder / "dark.tcss").is_file():
            return folder / "dark.tcss"
    return None


def base_theme_of(theme: Path | None) -> str:
    if theme is None:
        return "textual-dark"
    try:
        m = _BASE_THEME.search(Path(theme).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return "textual-dark"
    return m.group(1) if m else "textual-dark"


def _restore_terminal_and_exit(app: App) -> None:
    """Second Ctrl+C: leave the alternate screen, give the terminal back, end the process now."""
    driver = app._driver
    try:
        if driver is not None:
            driver.stop_application_mode()
            driver.close()  # flushes the restore sequences still queued in the writer thread
    finally:
        os._exit(130)


class DashboardApp(App[int]):
    """The dashboard of one run. `source` delivers events; `controller` steers (None: read-only)."""

    TITLE = "tuitrain"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = [
        Binding("c", "checkpoint", "Checkpoint"),
        Binding("p", "pause", "Pause"),
        Binding("q", "quit_request", "Quit"),
        Binding("ctrl+c", "interrupt", "Stop now", priority=True),
        Binding("tab", "metric(1)", "Metric", priority=True),
        Binding("shift+tab", "metric(-1)", "Metric", show=False, priority=True),
        Binding("right", "metric(1)", "Metric", show=False),
        Binding("left", "metric(-1)", "Metric", show=False),
        Binding("up,down", "toggle_window", "Window"),
        Binding("s", "show_result", "Summary", show=False),
        Binding("question_mark", "help", "Keys"),
    ]

    def __init__(self, source: Source, controller: Controller | None = None, theme: Path | None = None, *,
                 watch: bool = False, notice: str = "", clock: Callable[[], float] = time.time,
                 drain_interval: float = 1 / 15, plot_interval: float = 1.0,
                 hard_exit: Callable[[App], None] | None = None, use_default_theme: bool = True,
                 ui_share: float = UI_SHARE, cpu_clock: Callable[[], float] = time.thread_time) -> None:
        if theme is None and use_default_theme:
            theme = default_theme()
        self.theme_path = Path(theme) if theme is not None else None
        css = [DASHBOARD_TCSS] + ([self.theme_path] if self.theme_path is not None else [])
        super().__init__(css_path=css)
        self.source = source
        self.controller = controller
        self.watching = watch
        self.notice = notice
        self.clock = clock
        self.drain_interval = drain_interval
        self._drain_every = drain_interval  # the drain timer's interval now (see BUSY_DRAIN_INTERVAL)
        self._drain_timer: Timer | None = None
        self.plot_interval = plot_interval
        self.hard_exit = hard_exit or _restore_terminal_and_exit
        self.bridge = EventBridge()
        self.state = DashboardState(clock=clock)
        self.metric = ""
        self.window = "full"
        self.exit_code: int | None = None  # from the source's work (live) once it returned
        self.worker_done = False
        self.interrupts = 0
        self.leave_when_done = False
        self._dirty: set[str] = set()
        self._last_plot = 0.0
        self._last_progress = 0.0
        self._title_shown: tuple | None = None
        self.ui_share = ui_share
        self.cpu_clock = cpu_clock  # this thread's CPU time: what the screen costs
        self.slow = 1.0  # the factor on the refresh intervals (see UI_SHARE)
        self._pace_at = time.monotonic()
        self._pace_cpu = cpu_clock()
        self._paced = False
        self._status_shown: tuple = ()
        self._plot_title = ""
        self._result_shown = False
        self._source_closed = False
        self._base_theme = base_theme_of(self.theme_path)

    # --- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="title-bar")
        with Horizontal(id="main"):
            with Vertical(id="plot-column"):
                yield MetricPlot(id="plot", classes="panel")
                yield OutputLog(id="log", classes="panel")
            with VerticalScroll(id="side"):
                yield ProgressPanel(id="progress", classes="panel")
                yield DevicesPanel(id="devices", classes="panel")
                yield CheckpointList(clock=self.clock, id="checkpoints", classes="panel")
        with Horizontal(id="bottom-bar"):
            yield ControlBar(id="controls")
            yield Static(self.notice, id="notice")
        yield Static("The terminal is too small for the dashboard: make it larger (at least 50x12).\n"
                     "Training goes on; q leaves.", id="too-small")
        yield Footer()

    def on_mount(self) -> None:
        if self._base_theme == HIGH_CONTRAST.name:
            self.register_theme(HIGH_CONTRAST)
        try:
            self.theme = self._base_theme
        except Exception:
            self.theme = "textual-dark"  # an unknown base theme name must not stop the dashboard
        self.query_one("#plot").border_title = "metrics"
        self.query_one("#log").border_title = "output"
        self.query_one("#progress").border_title = "progress"
        self.query_one("#devices").border_title = "devices"
        self.query_one("#checkpoints").border_title = "checkpoints"
        self._title()
        self._layout_for(self.size.width, self.size.height)
        if self.controller is None:
            self.query_one(ControlBar).set_enabled(False)
        if hasattr(self.source, "backlog"):
            self.source.backlog = self.bridge.__len__  # a file reader waits for the screen
        self.source.open(self.bridge)
        self.run_worker(self._work, name="tuitrain-source", thread=True, exit_on_error=False)
        self._drain_timer = self.set_interval(self._drain_every, self.drain, name="drain")
        self.set_interval(1.0, self._every_second, name="clock")
        self.drain()

    def _work(self) -> None:
        try:
            code = self.source.work()
        except BaseException as exc:  # an escaped error still ends the run: show it, exit 1
            self.post_message(TrainingEnded(1, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            return
        self.post_message(TrainingEnded(code))

    def on_resize(self, event: events.Resize) -> None:
        self._layout_for(event.size.width, event.size.height)

    def _layout_for(self, width: int, height: int) -> None:
        self.set_class(width < COMPACT[0] or height < COMPACT[1], "-compact")
        self.set_class(width < TOO_SMALL[0] or height < TOO_SMALL[1], "-too-small")

    def _title(self) -> None:
        st = self.state
        name = st.experiment or "tuitrain"
        where = st.run_dir or (str(getattr(self.source, "run_dir", "")) if self.watching else "")
        mode = "watching" if self.watching else "live"
        key = (name, where, mode)
        if key == self._title_shown:
            return
        self._title_shown = key
        text = Text.assemble((f" {name}", "bold"), f"  {where}" if where else "", f"  [{mode}]")
        self.query_one("#title-bar", Static).update(text, layout=False)  # one line, always

    # --- the event stream ------------------------------------------------------------------

    def drain(self) -> None:
        """Fold what the bridge holds into the state and refresh the panels that changed."""
        every = self.drain_interval
        st = self.state
        if not (self.watching or self.worker_done or st.ended or st.paused):
            every = max(every, BUSY_DRAIN_INTERVAL)
        if every != self._drain_every and self._drain_timer is not None:
            self._drain_timer.stop()
            self._drain_every = every
            self._drain_timer = self.set_interval(every, self.drain, name="drain")
        batch = self.bridge.drain(DRAIN_LIMIT)
        if batch:
            self._dirty |= self.state.apply(batch)
        dirty = self._dirty
        if not dirty:
            return
        now = time.monotonic()
        self._pace(now)
        keep: set[str] = set()  # what waits for its turn
        if "progress" in dirty:
            # a change of state (paused, stopping, checkpointing, ended) shows at once; counters wait
            status = (st.activity, st.paused, st.stopping, st.checkpointing, st.final, st.epoch)
            if (now - self._last_progress >= PROGRESS_INTERVAL * self.slow or status != self._status_shown
                    or st.ended):
                self._status_shown = status
                self._last_progress = now
                self._refresh_progress()
                if st.experiment:
                    self._title()
            else:
                keep.add("progress")
        if "devices" in dirty:
            self.query_one(DevicesPanel).show(st.devices, st.env)
        if "checkpoints" in dirty:
            self.query_one(CheckpointList).show(st.checkpoints, st.best_file, st.monitor)
        if "log" in dirty:
            log = self.query_one(OutputLog)
            for stream, text in st.take_lines():
                log.add(stream, text)
        if "plot" in dirty:
            if now - self._last_plot >= self._plot_wait() or st.ended:
                self._last_plot = now
                self._replot()
            else:
                keep.add("plot")
        if "result" in dirty and st.ended and (self.watching or self.worker_done):
            self._show_result()
        self._dirty = keep

    def _plot_wait(self) -> float:
        """Seconds between plot refreshes: the interval, spread out by `slow`, and while training runs
        in this process at least the last figure's build cost over PLOT_SHARE."""
        wait = self.plot_interval * self.slow
        st = self.state
        if not (st.ended or st.paused or self.watching):
            wait = max(wait, self.query_one(MetricPlot).build_cost / PLOT_SHARE)
        return wait

    def _pace(self, now: float) -> None:
        """Every PACE_WINDOW seconds: the screen's share of a core sets `slow` (see UI_SHARE)."""
        elapsed = now - self._pace_at
        if elapsed < PACE_WINDOW:
            return
        cpu = self.cpu_clock()
        share = (cpu - self._pace_cpu) / elapsed
        self._pace_at, self._pace_cpu = now, cpu
        if not self._paced:  # the first window holds the screen's start-up (compose, first frames)
            self._paced = True
            return
        if self.state.ended or self.state.paused or self.watching:
            self.slow = 1.0  # nothing to give way to: no training, or it runs in another process
        else:  # converges where the screen takes its share; at most doubles per window
            self.slow = min(MAX_SLOW, max(1.0, self.slow * min(2.0, share / self.ui_share)))

    def _refresh_progress(self) -> None:
        st = self.state
        note = ""
        if self.leave_when_done and not st.ended:
            note = "leaving when stopped"
        elif self.interrupts and not st.ended:
            note = "Ctrl+C again ends the process"
        self.query_one(ProgressPanel).show(st, note)
        self.query_one(ControlBar).set_paused(st.paused)
        if st.ended and self.controller is not None and self.watching:
            self._read_only("the run has ended; keys that steer are off")

    def _replot(self) -> None:
        names = self.state.metric_names
        if not self.metric and names:
            self.metric = names[0]
        plot = self.query_one(MetricPlot)
        plot.show(self.state, self.metric, self.window)
        where = f"{names.index(self.metric) + 1}/{len(names)}" if self.metric in names else "-"
        window = "recent window" if self.window == "recent" else "full history"
        title = f"{self.metric or 'metrics'} ({where}) · {window}"
        if title != self._plot_title:  # each assignment is a repaint
            self._plot_title = plot.border_title = title
            plot.border_subtitle = "Tab ←→ metric · ↑↓ window"

    def _every_second(self) -> None:
        self._dirty.add("progress")  # elapsed time and ETA move without events; drain paces it
        self.query_one(CheckpointList).render_rows()  # ages
        if self.watching and not self.state.ended and getattr(self.source, "caught_up", False):
            self._check_alive()

    def _check_alive(self) -> None:
        """Watching: a run whose process is gone without a final event was killed."""
        from tuitrain.sinks.run_status import live_status as run_status

        run_dir = getattr(self.source, "run_dir", None)
        if run_dir is None or run_status(run_dir) in ("running", "unknown"):
            return
        if self.controller is not None:
            self._read_only("the run's process is gone; keys that steer are off")
        if run_status(run_dir) == "killed":
            self.state.final = "killed"
            self._refresh_progress()

    def _read_only(self, why: str) -> None:
        self.controller = None
        self.query_one(ControlBar).set_enabled(False)
        self.query_one("#notice", Static).update(why)

    def on_training_ended(self, message: TrainingEnded) -> None:
        self.worker_done = True
        self.exit_code = message.exit_code
        if message.error and self.state.failed is None:
            from tuitrain.core.events import RunFailed

            self.bridge(RunFailed(error=message.error, traceback=message.traceback,
                                  epoch=self.state.epoch, step=self.state.step), None)
        while self.bridge.pending():  # the last events, the final one included, may still sit there
            self.drain()
        if not self.watching:
            if self.leave_when_done:
                self.leave()
                return
            if self.state.ended:
                self._show_result()
            else:  # work returned without a final event (a fake or a crashed core)
                self.query_one("#notice", Static).update(f"training ended, exit code {self.exit_code}")
                self.state.final = self.state.final or ("completed" if self.exit_code == 0 else "interrupted")
                self._refresh_progress()
                self._show_result()
            self.query_one(ControlBar).set_enabled(False)

    def _show_result(self) -> None:
        if self._result_shown:
            return
        self._result_shown = True
        self._replot()
        self.push_screen(ResultScreen(self.state, self.exit_code))

    # --- keys ------------------------------------------------------------------------------

    @property
    def training_over(self) -> bool:
        """Nothing left to steer: the run ended (live: its thread returned)."""
        return self.worker_done if not self.watching else self.state.ended

    def _steer(self, what: str) -> bool:
        if self.controller is None or self.training_over:
            self.notify("nothing to steer: " + ("the run has ended" if self.training_over else "read-only"),
                        severity="warning", timeout=3)
            return False
        return True

    def action_checkpoint(self) -> None:
        if self._steer("checkpoint"):
            self.controller.request_checkpoint("dashboard")
            self.notify("checkpoint requested", timeout=2)

    def action_pause(self) -> None:
        if self._steer("pause"):
            self.controller.toggle_pause("dashboard")
            self.notify("resume requested" if self.state.paused else "pause requested", timeout=2)

    def action_quit_request(self) -> None:
        if self.controller is None or self.training_over:
            self.leave()
            return
        self.push_screen(ConfirmScreen("Stop training and leave?", offer_leave=self.watching), self._confirmed)

    def _confirmed(self, answer: str | None) -> None:
        if answer == "leave":
            self.leave()
        elif answer == "stop":
            if self.training_over or self.controller is None:
                self.leave()
                return
            self.controller.request_stop("dashboard", "quit")
            if self.watching:
                self.leave()  # the run in the other process stops on its own
            else:
                self.leave_when_done = True
                self._refresh_progress()
                self.notify("stopping: saving a checkpoint, then leaving", timeout=5)

    def action_interrupt(self) -> None:
        if self.training_over or self.controller is None or self.watching:
            self.leave()  # watching: Ctrl+C leaves the viewer, the run goes on
            return
        self.interrupts += 1
        if self.interrupts > 1:
            self.hard_exit(self)
            return
        self.controller.request_stop("dashboard", "ctrl+c")
        self.leave_when_done = True
        if isinstance(self.screen, ModalScreen):
            self.screen.dismiss()
        self._refresh_progress()
        self.notify("stopping gracefully; Ctrl+C again ends the process", severity="warning", timeout=5)

    def action_metric(self, delta: int) -> None:
        if isinstance(self.screen, ConfirmScreen):
            self.screen.dismiss("cancel")  # any other key cancels, Tab included
            return
        if isinstance(self.screen, ModalScreen):
            return
        names = self.state.metric_names
        if not names:
            return
        i = names.index(self.metric) if self.metric in names else 0
        self.metric = names[(i + delta) % len(names)]
        self._replot()

    def action_toggle_window(self) -> None:
        self.window = "recent" if self.window == "full" else "full"
        self._replot()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        note = ""
        if self.controller is None:
            note = "This run cannot be steered from here: c, p and the buttons are off."
        elif self.watching:
            note = "Watching a run in another process: c, p and q-y act on it; Ctrl+C leaves the viewer."
        self.push_screen(HelpScreen(note))

    def action_show_result(self) -> None:
        if self.state.ended and not isinstance(self.screen, ResultScreen):
            self._result_shown = False
            self._show_result()

    def on_control_bar_requested(self, message: ControlBar.Requested) -> None:
        {"stop": self.action_quit_request, "pause": self.action_pause,
         "checkpoint": self.action_checkpoint}[message.command]()

    def action_leave(self) -> None:
        self.leave()

    def leave(self) -> None:
        self._close_source()
        code = self.exit_code if self.exit_code is not None else (0 if self.watching else 130)
        message = None
        if self.state.ended:
            message = Text(f"{result_title(self.state)}\n{result_body(self.state, self.exit_code)}")
        self.exit(code, message=message)

    def _close_source(self) -> None:
        if not self._source_closed:
            self._source_closed = True
            self.source.close()

    def exit(self, result: int | None = None, return_code: int = 0, message: Any = None) -> None:
        """Every way out (q, Ctrl+Q, a test's pilot) ends the source, so no thread outlives the app."""
        self._end_source()
        super().exit(result, return_code, message)

    def _end_source(self) -> None:
        if not self.watching and not self.worker_done and self.controller is not None and not self._source_closed:
            self.controller.request_stop("dashboard", "dashboard closed")  # never train on unseen
        self._close_source()

    def on_unmount(self) -> None:
        self._end_source()

    async def action_quit(self) -> None:
        self.action_quit_request()  # Ctrl+Q asks too, as q does


# --- entry points --------------------------------------------------------------------------


def run_live(run: Any, theme: Path | None) -> int:
    """Train `run` (subscribe/execute/interrupter/run_dir) under the dashboard; its exit code."""
    app = DashboardApp(RunSource(run), run.interrupter, theme)

    def on_term(signum, frame):  # nobody is there to read a summary: stop gracefully, then leave
        app.leave_when_done = True
        run.interrupter.request_stop("signal", signal.Signals(signum).name)

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        app.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if app.exit_code is not None:
        return app.exit_code
    return 130 if run.interrupter.stop_requested else 1


def run_watch(run_dir: Path, theme: Path | None) -> int:
    """The dashboard of a run from its files; steers it through FileControl while it is live."""
    from tuitrain.sinks.run_status import live_status as run_status

    run_dir = Path(run_dir)
    status = run_status(run_dir)
    live = status == "running"
    controller = FileControl(run_dir) if live else None
    notice = {"running": "", "killed": "the run's process is gone: keys that steer are off"}.get(
        status, "finished run: keys that steer are off")
    app = DashboardApp(FileSource(run_dir, live=live), controller, theme, watch=True, notice=notice)
    app.run()
    return 0


__all__ = ["DashboardApp", "run_live", "run_watch"]
