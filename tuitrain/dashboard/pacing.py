"""The event stream and the pacing of redraws: `drain` folds what the bridge holds into the state
and refreshes the panels that changed, no more often than the screen can afford while training
runs in this process (`UI_SHARE`, `PACE_WINDOW`, `MAX_SLOW`, `PLOT_SHARE`, `BUSY_DRAIN_INTERVAL`,
`DRAIN_LIMIT`, `PROGRESS_INTERVAL`); the progress and plot refreshes, and the once-a-second clock.

`Pacer` decides when (clock readings in, a decision out) and knows nothing of Textual: it is tested
alone (tests/dashboard/test_pacer.py). `PacingMixin` is one part of `DashboardApp`
(tuitrain/dashboard/app.py): it drains, asks its `pacer`, and refreshes the panels. Like the rest of the dashboard, this module must not import the run layer
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


class PacingMixin:
    """`DashboardApp`'s drain of the event stream; when to redraw is its `pacer`'s decision."""

    def _relaxed(self) -> bool:
        """Nothing to give way to: paused, ended, or the run trains in another process."""
        st = self.state
        return bool(self.watching or st.ended or st.paused)

    def drain(self) -> None:
        """Fold what the bridge holds into the state and refresh the panels that changed."""
        if not self.is_running:  # shutting down: a timer still due finds the panels gone
            return
        st = self.state
        every = self.pacer.drain_every(self.drain_interval, self._relaxed() or self.worker_done)
        if every != self._drain_every and self._drain_timer is not None:
            self._drain_timer.stop()
            self._drain_every = every
            self._drain_timer = self.set_interval(every, self.drain, name="drain")
        batch = self.bridge.drain(DRAIN_LIMIT)
        if batch:
            changed = self.state.apply(batch)
            if "alerts" in changed:
                self._dirty.add("plot")  # the charts' marks at the alerts' steps
                if st.bell and not self.watching:  # a live alert, not one read back from a finished run
                    self.bell()
            self._dirty |= changed
        skipped = self.skipped_lines()
        if skipped != getattr(self, "_skipped_shown", 0):  # the one notice of damaged lines, counted
            self._skipped_shown = skipped
            self.set_notice(self.notice)
        dirty = self._dirty
        if not dirty:
            return
        now = self.pace_clock()
        pacer = self.pacer
        pacer.observe(now, self.cpu_clock(), self._relaxed())
        keep: set[str] = set()  # what waits for its turn
        if "progress" in dirty:
            # a change of state (paused, stopping, checkpointing, ended) shows at once; counters wait
            status = (st.activity, st.paused, st.stopping, st.checkpointing, st.final, st.epoch)
            if pacer.progress_due(now, status, st.ended):
                self._refresh_progress()
            else:
                keep.add("progress")
        if "devices" in dirty:
            self.query_one(DevicesPanel).show(st.devices, st.env)
        if "checkpoints" in dirty:
            self.query_one(CheckpointList).show(st.checkpoints, st.best_file, st.monitor)
        if "log" in dirty:
            log = self.query_one(OutputLog)
            for stream, text, partial in st.take_lines():
                log.add(stream, text, partial)
            if log.count and not log.has_class("-has-lines"):
                log.add_class("-has-lines")  # the panel takes rows from its first line on
        if "plot" in dirty:
            loading = self.watching and not getattr(self.source, "caught_up", True)
            if pacer.plot_due(now, self.query_one(ChartGrid).build_cost(), self._relaxed(), st.ended, loading):
                self._replot()
            else:
                keep.add("plot")
        if "result" in dirty and st.ended and (self.watching or self.worker_done):
            if self.watching and self.leave_when_done:  # an owned run stopped from here
                self.leave()
                return
            self._show_result()
        self._dirty = keep

    def _refresh_progress(self) -> None:
        st = self.state
        note = ""
        if self.leave_when_done and not st.ended:
            note = "leaving when stopped"
        elif self.interrupts and not st.ended:
            note = "Ctrl+C again ends the process"
        self.query_one(ProgressPanel).show(st, note)
        self._title()
        self.query_one(ControlBar).set_paused(st.paused)
        if st.ended and self.controller is not None and self.watching:
            self._read_only("the run has ended; keys that steer are off")

    def _replot(self) -> None:
        self.query_one(ChartGrid).show(self.state)

    def _every_second(self) -> None:
        if not self.is_running:  # shutting down (see drain)
            return
        self._dirty.add("progress")  # elapsed time and ETA move without events; drain paces it
        self.query_one(CheckpointList).render_rows()  # ages
        if self.watching and not self.state.ended and getattr(self.source, "caught_up", False):
            self._check_alive()
