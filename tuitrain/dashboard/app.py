"""The Textual dashboard: `DashboardApp`, its keys and its way out. The entry points the CLI calls,
`run_live` (train in this process under the dashboard), `run_watch` (follow a run directory's
events.jsonl) and `run_compare`, are tuitrain/dashboard/entry.py's.

The app never calls into the training loop: events arrive through an `EventBridge` drained on a
timer, and keys act through a `Controller` (the run's `Interrupter`, or `FileControl` for a run
in another process).

`DashboardApp` holds the run (its source, controller and state), its keys (c p q Ctrl+C r ? R d P)
and the decisions: steer, leave, turn read-only, show the result. It hands its collaborators what they
work with, and they tell it what happened by messages (`TrainingEnded`, `Feed.Settled`, `Feed.Stopped`,
the widgets' own):
  screen.py  `DashboardScreen`: the widgets, their titles and layout, the title bar and notice
  dashboard/charts/chart_grid.py  `ChartGrid`: the charts and the chart keys (l s x w / e i, Enter, Esc, arrows, Tab)
  feed.py    `Feed` (`app.feed`): the event stream into the state and onto the screen, paced by
             `app.pacer` (pacing.py `Pacer`: when to redraw)
  ending.py  `Ending` (`app.ending`): the result screen; the words at the end
  layout.py  the sizes and themes
and entry.py holds `run_live` and `run_watch`; live.py the live run (`LiveRun`: the app's source and
controller in one object) and `LiveApp`.
This module must not import the run layer (`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`,
`tuitrain.build`, `tuitrain.runs`, `tuitrain.cli`): the dashboard imports only `tuitrain.core`,
`tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any
from collections.abc import Callable

from rich.text import Text
from textual.app import App
from textual.binding import Binding
from textual.screen import ModalScreen

from tuitrain.core.control import Controller
from tuitrain.dashboard.steering import SteeredApp, restore_terminal_and_exit
from tuitrain.core.text import safe_text
from tuitrain.dashboard.state.bridge import EventBridge
from tuitrain.dashboard.screens.ending import Ending, ended_notice, stopped_why
from tuitrain.dashboard.state.feed import Feed
from tuitrain.dashboard.layout import DASHBOARD_TCSS, HIGH_CONTRAST, base_theme_of, default_theme
from tuitrain.dashboard.messages import TrainingEnded
from tuitrain.dashboard.state.compared import compared
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.dashboard.state.pacing import UI_SHARE, Pacer
from tuitrain.sources.run_files import Source, skipped_lines
from tuitrain.dashboard.export import export_folder, write_view
from tuitrain.dashboard.screens.screen import DashboardScreen
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.panels.control_bar import ControlBar
from tuitrain.dashboard.screens.help_screen import HelpScreen
from tuitrain.dashboard.screens.result_screen import ResultScreen, result_body, result_title
from tuitrain.dashboard.panels.run_list import RunList


class DashboardApp(SteeredApp):
    """The dashboard of one run. `source` delivers events; `controller` steers (None: read-only)."""

    TITLE = "tuitrain"
    ENABLE_COMMAND_PALETTE = False
    ESCAPE_TO_MINIMIZE = False  # Esc reaches action_unzoom, which ends inspecting before it leaves the zoom

    #: the run's keys (the chart keys are `ChartGrid`'s: tuitrain/dashboard/charts/chart_grid.py)
    BINDINGS = [
        Binding("c", "checkpoint", "Checkpoint"),
        Binding("p", "pause", "Pause"),
        Binding("p", "resume", "Resume"),  # the footer says what p does now (see check_action)
        Binding("q", "quit_request", "Quit"),
        Binding("ctrl+c", "interrupt", "Stop now", priority=True),
        Binding("ctrl+c", "leave_viewer", "Leave", priority=True),  # ctrl+c when there is nothing to stop
        Binding("d", "differences", "Config diff", show=False),
        Binding("R", "runs", "Runs"),  # comparing runs: the run list (hidden otherwise, see check_action)
        Binding("P", "parameters", "Params"),  # a sweep: the parameters view (hidden otherwise)
        Binding("r", "show_result", "Summary", show=False),
        Binding("question_mark", "help", "Keys"),
        Binding("ctrl+z", "suspend", "Suspend", show=False),
    ]
    #: the keys the footer shows after the chart keys (the run's keys come before them)
    FOOTER_AFTER = frozenset({"d", "R", "P", "r", "question_mark"})

    def __init__(
        self,
        source: Source,
        controller: Controller | None = None,
        theme: Path | None = None,
        *,
        watch: bool = False,
        owned: bool = False,
        notice: str = "",
        clock: Callable[[], float] = time.time,
        drain_interval: float = 1 / 15,
        plot_interval: float = 1.0,
        hard_exit: Callable[[App], None] | None = None,
        use_default_theme: bool = True,
        ui_share: float = UI_SHARE,
        cpu_clock: Callable[[], float] = time.thread_time,
        pace_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if theme is None and use_default_theme:
            theme = default_theme()
        self.theme_path = Path(theme) if theme is not None else None
        css = [DASHBOARD_TCSS] + ([self.theme_path] if self.theme_path is not None else [])
        super().__init__(css_path=css)
        self.source = source
        self.controller = controller
        self.watching = watch
        # watching the run of the process that started this viewer (`Monitor`): the user has no other
        # screen for it, so Ctrl+C and q-y stop it and leave once it ended, as a live run's do
        self.owned = watch and owned
        self.notice = notice
        self.clock = clock
        self.drain_interval = drain_interval
        self.hard_exit = hard_exit or restore_terminal_and_exit
        self.bridge = EventBridge()
        self.state = DashboardState(clock=clock)
        self.exit_code: int | None = None  # from the source's work (live) once it returned
        self.worker_done = False
        self.interrupts = 0
        self.leave_when_done = False
        self.cpu_clock = cpu_clock  # this thread's CPU time: what the screen costs
        self.pace_clock = pace_clock  # seconds, for the pace of redraws
        #: when to redraw (pacing.py): the clocks in, a decision out
        self.pacer = Pacer(pace_clock(), cpu_clock(), ui_share=ui_share, plot_interval=plot_interval)
        #: the event stream into the state and onto the screen, as the pacer says (feed.py)
        self.feed = Feed(
            self,
            self.bridge,
            source,
            self.pacer,
            tick=self.drain,
            interval=drain_interval,
            watching=watch,
            watching_label=watch and not self.owned,
            note=self.progress_note,
            pace_clock=pace_clock,
            cpu_clock=cpu_clock,
        )
        #: the result screen at the run's end (ending.py)
        self.ending = Ending(self, self.feed)
        self._source_closed = False
        self._base_theme = base_theme_of(self.theme_path)
        self.last_export: Path | None = None
        self.dashboard: DashboardScreen | None = None  # the screen, once the app runs
        #: what broke the screen (an exception in a widget or handler), once it did: the app has ended
        self.failure: BaseException | None = None
        self._last_c = -1e9  # pace_clock time of the last `c`
        self._leaving = False  # `leave` called: the app is on its way out
        self._paused_shown = False  # the pause the footer's `p` speaks of
        self._tool_shown = ""  # the foreign tool the panels speak of (`_show_tool`)

    def get_default_screen(self) -> DashboardScreen:
        """The dashboard's screen: it composes and lays out the widgets (tuitrain/dashboard/screens/screen.py)."""
        self.dashboard = DashboardScreen(
            comparing=self.comparing,
            clock=self.clock,
            notice=self.notice,
            skipped=self.skipped_lines(),
            footer_after=self.FOOTER_AFTER,
        )
        return self.dashboard

    async def on_mount(self) -> None:
        """Once the screen's widgets are mounted: the run shown, its source read, the timers started."""
        await self.dashboard.composed.wait()
        if self.state.kind == "run":  # a foreign log's run: named, and live or not, before its first event
            self.state.seed(self.source)
        self.feed.show_on(self.dashboard, self.state)
        self._set_theme()
        self.feed.show_title()
        if self.controller is None:
            self.steering_changed()
        if hasattr(self.source, "backlog"):
            self.source.backlog = self.bridge.__len__  # a file reader waits for the screen
        self._files_of_source()
        self.source.open(self.bridge)
        self.run_worker(self._work, name="tuitrain-source", thread=True, exit_on_error=False)
        self.feed.start()
        self.drain()

    def _set_theme(self) -> None:
        if self._base_theme == HIGH_CONTRAST.name:
            self.register_theme(HIGH_CONTRAST)
        try:
            self.theme = self._base_theme
        except Exception:
            self.theme = "textual-dark"  # an unknown base theme name must not stop the dashboard

    # --- what the screen shows -------------------------------------------------------------

    @property
    def comparing(self) -> bool:
        """Several runs watched (`tuitrain watch A B`, an experiment folder, a sweep: maybe none yet)."""
        return self.state.kind != "run"

    @property
    def sweeping(self) -> bool:
        """A sweep's trials watched (`SweepState`): the parameters view is there to open."""
        return self.state.kind == "sweep"

    def set_notice(self, text: str) -> None:
        """The bottom bar's one line of notice (shown as typed, never as markup)."""
        self.notice = text
        self.dashboard.show_notice(text, self.skipped_lines())

    def skipped_lines(self) -> int:
        """Lines of the run's events.jsonl (or the compared runs') left out as damaged."""
        return skipped_lines(self.source)

    def progress_note(self) -> str:
        """The progress panel's note while the run has not ended: a stop asked for from here."""
        if self.leave_when_done:
            return "leaving when stopped"
        return "Ctrl+C again ends the process" if self.interrupts else ""

    def _files_of_source(self) -> None:
        """Where the states' runs' files are read from (a watched run may have moved since it was
        written): the inspect readout looks values up there."""
        run_dir = getattr(self.source, "run_dir", None)
        if isinstance(run_dir, Path) and getattr(self.source, "readers", None) is None:
            self.state.files_dir = run_dir
        runs = compared(self.state).runs if self.comparing else {}
        for name, reader in (getattr(self.source, "readers", None) or {}).items():
            if runs and name in runs:
                runs[name].files_dir = reader.run_dir

    def _work(self) -> None:
        try:
            code = self.source.work()
        except BaseException as exc:  # an escaped error still ends the run: show it, exit 1
            self.post_message(TrainingEnded(1, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            return
        self.post_message(TrainingEnded(code))

    def drain(self) -> None:
        """Fold what the bridge holds into the state and refresh the panels that changed (`Feed`;
        the drain timer calls this method)."""
        self.feed.drain()
        if self.state.kind == "run" and self.state.tool != self._tool_shown:
            self._show_tool()
        if bool(self.state.paused) != self._paused_shown:  # the footer: p Pause, or p Resume
            self._paused_shown = bool(self.state.paused)
            self.refresh_bindings()

    def _show_tool(self) -> None:
        """A run read from another tool's log: the panels of what such a log never holds say so."""
        from tuitrain.dashboard.state.foreign import absent_line

        self._tool_shown = tool = self.state.tool
        if self.dashboard is None:
            return
        line = absent_line(tool) if tool else ""
        self.dashboard.devices.say_empty(line or "no device samples yet")
        self.dashboard.checkpoints.say_empty(line or "no checkpoint yet")

    # Textual's one funnel for an unhandled exception, private: it has no public hook (textual 0.80 to
    # 8.2). The screen ends at once (`panic`, with nothing to print: no traceback over the terminal), exit
    # code 1; `failure` keeps the error for whoever started the app to report in one line.
    def _handle_exception(self, error: Exception) -> None:
        if self.failure is None:
            self.failure = error
        self.exit(return_code=1)
        self.panic()

    # --- the run's end ---------------------------------------------------------------------

    def on_training_ended(self, message: TrainingEnded) -> None:
        """The source's work returned: its last events shown; then a live run's result, or leaving."""
        self.worker_done = True
        self.exit_code = message.exit_code
        self.feed.work_returned()
        if message.error and self.state.failed is None:
            from tuitrain.core.lifecycle import run_failed

            self.bridge(
                run_failed(message.error, traceback=message.traceback, epoch=self.state.epoch, step=self.state.step),
                None,
            )
        # the last events, the final one included, may still sit there (drain does nothing once shutting down)
        while self.is_running and self.bridge.pending():
            self.drain()
        if not self.watching:
            # a config error found while building the user's parts: no run to show; leave at once, and
            # `tuitrain run` prints the one line, as it does for config errors found before the screen opened
            config_error = getattr(getattr(self.source, "run", None), "config_error", None)
            if self.leave_when_done or config_error is not None:
                self.leave()
                return
            self.set_notice(ended_notice(self.state, self.exit_code))
            if not self.state.ended:  # work returned without a final event
                self.state.final = self.state.final or ("completed" if self.exit_code == 0 else "interrupted")
                self.feed.refresh_progress()
            self.ending.show_result(self.state, self.exit_code)
        self.steering_changed()

    def on_feed_settled(self, message: Feed.Settled) -> None:
        """The run's end is in, with all the source read: a watched run can no longer be steered; an
        owned run stopped from here leaves; else the result screen (once)."""
        if self._source_closed:  # leaving already
            return
        if self.watching and self.controller is not None:
            self.read_only("the run has ended; keys that steer are off")
        if self.watching and self.leave_when_done:
            self.leave()
        else:
            self.ending.show_result(self.state, self.exit_code)

    def on_feed_stopped(self, message: Feed.Stopped) -> None:
        """Watching: run.json says the run stopped before its final event is shown."""
        from tuitrain.sinks.run_status import KILLED

        if self.state.ended or self._source_closed:  # its final event came meanwhile: `Feed.Settled`'s
            return
        if self.controller is not None:
            self.read_only(
                stopped_why(message.status, getattr(self.source, "run_dir", None)) + "; keys that steer are off"
            )
        if message.status == KILLED:
            self.state.final = KILLED
            self.feed.refresh_progress()

    def read_only(self, why: str) -> None:
        """Nothing to steer any more: the controller let go, the keys and buttons off, `why` said."""
        self.controller = None
        self.steering_changed()
        self.set_notice(why)

    # --- keys ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that steer leave the footer (and do nothing) once there is nothing to steer (`SteeredApp`);
        R and P only where there are runs compared, a sweep. Once the app is leaving and its screens are
        gone, no key acts (a key queued behind `q` read no screen there)."""
        if not self.screen_stack:
            return False
        if action == "runs":
            return self.comparing
        if action == "parameters":
            return self.sweeping
        return super().check_action(action, parameters)

    def _on_dashboard(self) -> bool:
        """The dashboard's own screen is up (no dialog over it)."""
        return not isinstance(self.screen, ModalScreen)

    def on_chart_grid_export_requested(self, message: ChartGrid.ExportRequested) -> None:
        """e (a chart key, `ChartGrid`'s): the screen as SVG and every series as CSV in
        RUN_DIR/exports/STAMP/; the path shown. RUN_DIR is the folder read (watched: as typed, wherever the
        run was started or moved), the run_dir its events recorded only for a run in this process."""
        run_dir = str(getattr(self.source, "run_dir", "") or "") or self.state.run_dir
        if not run_dir:
            self.notify("nothing to export into: this run has no run directory", severity="warning", timeout=4)
            return
        try:
            folder = export_folder(run_dir, self.clock())
            written = write_view(self.state, folder)  # export.py: the series, histograms, samples' list
            self.save_screenshot(filename="screen.svg", path=str(folder))
        except OSError as e:
            self.notify(safe_text(f"export failed: {e}"), severity="error", timeout=6, markup=False)
            return
        self.last_export = folder
        self.notify(safe_text(f"exported the screen{written} to {folder}"), timeout=6, markup=False)
        self.set_notice(f"exported to {folder}")

    def action_differences(self) -> None:
        """d: the config keys whose values differ between the compared runs shown."""
        state = compared(self.state)
        runs = state.runs if self.comparing else {}
        if not runs or not self._on_dashboard():
            if not runs:
                self.notify("d compares configs when watching several runs (tuitrain watch A B)", timeout=4)
            return
        from tuitrain.dashboard.state.compare import run_color
        from tuitrain.dashboard.screens.diff_screen import DiffScreen

        names = state.shown_runs() or list(runs)
        numbers = [state.number[n] for n in names]
        self.push_screen(
            DiffScreen(
                names, state.differences(names), [run_color(i - 1) for i in numbers], numbers=numbers, of=len(runs)
            )
        )

    def action_runs(self) -> None:
        """R: the run list takes the keys (show/hide, pin, filter the runs); R again: the charts."""
        if not self._on_dashboard():
            return
        if self.screen.maximized is not None:
            self.screen.minimize()
        run_list = self.query_one(RunList)
        if run_list.has_focus:
            self._back_to_charts()
        else:
            run_list.focus()

    def action_parameters(self) -> None:
        """P: a sweep's parameters view (the metric against each searched parameter, the trials as
        parallel coordinates); P or Esc back."""
        if not self.sweeping or not self._on_dashboard():
            return
        from tuitrain.dashboard.screens.params_screen import ParamsScreen

        self.push_screen(ParamsScreen(self.state))

    def _back_to_charts(self) -> None:
        chart = self.dashboard.grid.current()
        if chart is not None:
            chart.focus()
        else:
            self.set_focus(None)

    def on_run_list_changed(self, message: RunList.Changed) -> None:
        """The runs shown changed: the charts, their titles and the legend follow."""
        if not self.is_running:  # shutting down (a key queued behind `q` `y`): the screen's widgets are going
            return
        if message.note == "charts":
            self._back_to_charts()
            return
        self.feed.replot()
        self.feed.show_title()
        if message.note:
            self.notify(safe_text(message.note), severity="warning", timeout=4, markup=False)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        note = ""
        if self.comparing:
            note = (
                "Comparing runs: R moves to the run list (space show/hide, p pin, o only this, a all, / filter by "
                "name or config value such as optimizer.lr=1e-3, v sort, Esc back); d shows the config keys "
                "that differ; c, p and the buttons are off."
            )
            if self.sweeping:
                note += " P: the sweep's parameters view."
        elif self.controller is None:
            note = "This run cannot be steered from here: c, p and the buttons are off."
        elif self.owned:
            note = "Your loop runs in another process: c, p, q-y and Ctrl+C act on it."
        elif self.watching:
            note = "Watching a run in another process: c, p and q-y act on it; Ctrl+C leaves the viewer."
        media = bool(self.state.media) and not self.comparing
        self.push_screen(HelpScreen(note, comparing=self.comparing, media=media))

    def action_show_result(self) -> None:
        if self.state.ended and not isinstance(self.screen, ResultScreen):
            self.ending.show_result(self.state, self.exit_code, again=True)

    def on_control_bar_requested(self, message: ControlBar.Requested) -> None:
        {"stop": self.action_quit_request, "pause": self.action_pause, "checkpoint": self.action_checkpoint}[
            message.command
        ]()

    def action_leave(self) -> None:
        self.leave()

    def leave(self) -> None:
        """Leave once: a second `q` (or `y`) read with the first would add a second exit message, and
        Textual then prints "NOTE: 1 of 2 errors shown" under the summary."""
        if self._leaving:
            return
        self._leaving = True
        self._close_source()
        code = self.exit_code if self.exit_code is not None else (0 if self.watching else 130)
        message = None
        if self.state.ended and not self.comparing:  # runs compared: no one run's summary is the view's
            message = Text(f"{result_title(self.state)}\n{result_body(self.state, self.exit_code)}")  # both made safe
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


__all__ = ["DashboardApp"]
