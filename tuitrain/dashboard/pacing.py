"""The event stream and the pacing of redraws: `drain` folds what the bridge holds into the state
and refreshes the panels that changed, no more often than the screen can afford while training
runs in this process (`UI_SHARE`, `PACE_WINDOW`, `MAX_SLOW`, `PLOT_SHARE`, `BUSY_DRAIN_INTERVAL`,
`DRAIN_LIMIT`, `PROGRESS_INTERVAL`); the progress and plot refreshes, and the once-a-second clock.

`Pacer` decides when (clock readings in, a decision out) and knows nothing of Textual: it is tested
alone (tests/dashboard/test_pacer.py). `Drain` is the app's (`DashboardApp.pacing`,
tuitrain/dashboard/app.py): it drains, asks the app's `pacer`, and refreshes the panels. Like the
rest of the dashboard, this module must not import the run layer
(`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`,
`tuitrain.cli`): only `tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

from tuitrain.dashboard.widgets.checkpoint_list import CheckpointList
from tuitrain.dashboard.widgets.control_bar import ControlBar
from tuitrain.dashboard.widgets.devices_panel import DevicesPanel
from tuitrain.dashboard.widgets.chart_grid import ChartGrid
from tuitrain.dashboard.widgets.output_log import OutputLog
from tuitrain.dashboard.widgets.progress_panel import ProgressPanel

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
# While a watched run's file is read from its start (a finished 1M-step run: a second or two), the
# charts are drawn at most this often: each draw of a half-read run is work the whole one waits for.
LOADING_PLOT_INTERVAL = 2.5


class Pacer:
    """When the screen redraws: fed the clocks (seconds, and the UI thread's CPU seconds) and what is
    going on (`relaxed`: paused, ended or watching another process's run, when the screen takes its
    time freely), it says whether a refresh is due now. `slow` is the factor on the refresh intervals:
    it grows (at most doubling per PACE_WINDOW) while the screen takes more than `ui_share` of a core,
    up to MAX_SLOW, and falls back to 1 when relaxed."""

    def __init__(self, now: float, cpu: float, *, ui_share: float = UI_SHARE, plot_interval: float = 1.0,
                 progress_interval: float = PROGRESS_INTERVAL) -> None:
        self.ui_share, self.plot_interval, self.progress_interval = ui_share, plot_interval, progress_interval
        self.created = now
        self.slow = 1.0
        self.window_at, self.window_cpu = now, cpu
        self.started = False  # the first window (the screen's start-up) is not counted
        self.last_progress = self.last_plot = 0.0
        self.status_shown: tuple = ()

    @staticmethod
    def drain_every(base: float, relaxed: bool) -> float:
        """The drain timer's interval: while training runs in this process, the screen wakes less often."""
        return base if relaxed else max(base, BUSY_DRAIN_INTERVAL)

    def observe(self, now: float, cpu: float, relaxed: bool) -> None:
        """Every PACE_WINDOW seconds: the screen's share of a core over the window sets `slow`."""
        elapsed = now - self.window_at
        if elapsed < PACE_WINDOW:
            return
        share = (cpu - self.window_cpu) / elapsed
        self.window_at, self.window_cpu = now, cpu
        if not self.started:
            self.started = True
            return
        if relaxed:
            self.slow = 1.0  # nothing to give way to: no training, or it runs in another process
        else:  # converges where the screen takes its share; at most doubles per window
            self.slow = min(MAX_SLOW, max(1.0, self.slow * min(2.0, share / self.ui_share)))

    def progress_due(self, now: float, status: tuple, ended: bool) -> bool:
        """A change of state shows at once; counters wait their (spread) interval. True: refresh now."""
        if now - self.last_progress >= self.progress_interval * self.slow or status != self.status_shown or ended:
            self.status_shown, self.last_progress = status, now
            return True
        return False

    def plot_wait(self, build_cost: float, relaxed: bool) -> float:
        """Seconds between plot refreshes: the interval, spread by `slow`, and while training runs in this
        process at least the last figure's build cost over PLOT_SHARE."""
        wait = self.plot_interval * self.slow
        return wait if relaxed else max(wait, build_cost / PLOT_SHARE)

    def plot_due(self, now: float, build_cost: float, relaxed: bool, ended: bool, loading: bool = False) -> bool:
        """True: redraw the charts now. `loading`: a watched file is still read from its start."""
        wait, since = self.plot_wait(build_cost, relaxed), self.last_plot
        if loading and not ended:  # the first draw too waits: a run read whole in a second or two is drawn once
            wait, since = max(wait, LOADING_PLOT_INTERVAL), max(since, self.created)
        if now - since >= wait or ended:
            self.last_plot = now
            return True
        return False


class Drain:
    """The event stream into the app's state (`drain`, on the app's timer), the panels that changed
    refreshed when the app's `pacer` says so, and the once-a-second clock. `DashboardApp` owns one
    (`app.pacing`) and works through the app's state, source and widgets."""

    def __init__(self, app) -> None:
        self.app = app
        self.every = app.drain_interval  # the drain timer's interval now (see BUSY_DRAIN_INTERVAL)
        self.timer = None  # the drain timer, once started
        self.dirty: set[str] = set()  # the panels that wait for a refresh
        self.skipped_shown = 0  # damaged lines counted in the notice

    def start(self) -> None:
        """The timers: the drain (`DashboardApp.drain`) and the clock."""
        app = self.app
        self.timer = app.set_interval(self.every, app.drain, name="drain")
        app.set_interval(1.0, self.every_second, name="clock")

    def relaxed(self) -> bool:
        """Nothing to give way to: paused, ended, or the run trains in another process."""
        app, st = self.app, self.app.state
        return bool(app.watching or st.ended or st.paused)

    def drain(self) -> None:
        """Fold what the bridge holds into the state and refresh the panels that changed."""
        app = self.app
        if not app.is_running:  # shutting down: a timer still due finds the panels gone
            return
        st = app.state
        every = app.pacer.drain_every(app.drain_interval, self.relaxed() or app.worker_done)
        if every != self.every and self.timer is not None:
            self.timer.stop()
            self.every = every
            self.timer = app.set_interval(every, app.drain, name="drain")
        # read before the batch is taken: the source had handed every past event over (a resumed run's
        # earlier sessions), so this batch holds none of them
        present = getattr(app.source, "caught_up", True)
        batch = app.bridge.drain(DRAIN_LIMIT)
        if batch:
            changed = st.apply(batch)
            if "alerts" in changed:
                self.dirty.add("plot")  # the charts' marks at the alerts' steps
            if "episode" in changed and st.bell and not app.watching and present:  # a live alert's new
                app.bell()  # episode, not one read back from a past session, nor each skip of one rung for
            self.dirty |= changed
        skipped = app.skipped_lines()
        if skipped != self.skipped_shown:  # the one notice of damaged lines, counted
            self.skipped_shown = skipped
            app.set_notice(app.notice)
        dirty = self.dirty
        if not dirty:
            return
        now = app.pace_clock()
        pacer = app.pacer
        pacer.observe(now, app.cpu_clock(), self.relaxed())
        keep: set[str] = set()  # what waits for its turn
        if "progress" in dirty:
            # a change of state (paused, stopping, checkpointing, ended) shows at once; counters wait
            status = (st.activity, st.paused, st.stopping, st.checkpointing, st.final, st.epoch)
            if pacer.progress_due(now, status, st.ended):
                self.refresh_progress()
            else:
                keep.add("progress")
        if "devices" in dirty:
            app.query_one(DevicesPanel).show(st.devices, st.env)
        if "checkpoints" in dirty:
            app.query_one(CheckpointList).show(st.checkpoints, st.best_file, st.monitor)
        if "log" in dirty:
            log = app.query_one(OutputLog)
            for stream, text, partial in st.take_lines():
                log.add(stream, text, partial)
            if log.count and not log.has_class("-has-lines"):
                log.add_class("-has-lines")  # the panel takes rows from its first line on
        if "plot" in dirty:
            loading = not getattr(app.source, "caught_up", True)
            if pacer.plot_due(now, app.query_one(ChartGrid).build_cost(), self.relaxed(), st.ended, loading):
                self.replot()
            else:
                keep.add("plot")
        if "result" in dirty and st.ended and (app.watching or app.worker_done):
            if not self.settled():  # an earlier session's end, read back: a later session may follow
                keep.add("result")
            elif app.watching and app.leave_when_done:  # an owned run stopped from here
                app.leave()
                return
            else:
                app.ending.show_result()
        self.dirty = keep

    def settled(self) -> bool:
        """The state has all the source has read (a watched file to its end, a resumed run's past
        sessions): its end is the run's, not an earlier session's."""
        app = self.app
        return getattr(app.source, "caught_up", True) and not app.bridge.pending()

    def refresh_progress(self) -> None:
        app, st = self.app, self.app.state
        note = ""
        if app.leave_when_done and not st.ended:
            note = "leaving when stopped"
        elif app.interrupts and not st.ended:
            note = "Ctrl+C again ends the process"
        app.query_one(ProgressPanel).show(st, note)
        app._title()
        if not st.metric_names:  # the chart area's "waiting for the first metrics… (step N, phase)"
            app.dashboard.show_chart_note(st)
        app.query_one(ControlBar).set_paused(st.paused)
        if st.ended and app.controller is not None and app.watching and self.settled():
            app.ending.read_only("the run has ended; keys that steer are off")

    def replot(self) -> None:
        self.app.query_one(ChartGrid).show(self.app.state)
        # the grid in place of the "waiting for the first metrics" note in this same pass, not a message later
        self.app.dashboard.show_chart_note(self.app.state)

    def every_second(self) -> None:
        app = self.app
        if not app.is_running:  # shutting down (see drain)
            return
        self.dirty.add("progress")  # elapsed time and ETA move without events; drain paces it
        app.query_one(CheckpointList).render_rows()  # ages
        if app.watching and not app.state.ended and getattr(app.source, "caught_up", False):
            app.ending.check_alive()
