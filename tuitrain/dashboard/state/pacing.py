"""When the screen redraws: `Pacer`, and the figures it paces by: no more often than the screen can
afford while training runs in this process (`UI_SHARE`, `PACE_WINDOW`, `MAX_SLOW`, `PLOT_SHARE`,
`BUSY_DRAIN_INTERVAL`, `DRAIN_LIMIT`, `PROGRESS_INTERVAL`, `LOADING_PLOT_INTERVAL`).

`Pacer` decides when (clock readings in, a decision out) and knows nothing of Textual: it is tested
alone (tests/dashboard/test_pacer.py). The app's `Feed` (tuitrain/dashboard/state/feed.py) drains the
events and refreshes the panels as it says. Like the rest of the dashboard, this module must not
import the run layer (`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`,
`tuitrain.runs`, `tuitrain.cli`): only `tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

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

    def __init__(
        self,
        now: float,
        cpu: float,
        *,
        ui_share: float = UI_SHARE,
        plot_interval: float = 1.0,
        progress_interval: float = PROGRESS_INTERVAL,
    ) -> None:
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


__all__ = [
    "BUSY_DRAIN_INTERVAL",
    "DRAIN_LIMIT",
    "LOADING_PLOT_INTERVAL",
    "MAX_SLOW",
    "PACE_WINDOW",
    "PLOT_SHARE",
    "PROGRESS_INTERVAL",
    "Pacer",
    "UI_SHARE",
]
