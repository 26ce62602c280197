"""`Feed`: the run's events onto the screen. On the app's drain timer it folds what the bridge holds
into the state and refreshes the panels that changed, as often as the `Pacer` (pacing.py) allows;
once a second it moves the clock (elapsed time, checkpoint ages) and, watching a run, reads whether
its process still runs.

It is given what it works with: the bridge, the source, the pacer and the clocks when the app is made,
the screen and the state once the screen is up (`show_on`). What is the app's to decide, it posts to
the app as a message: `Feed.Settled` (the run's end is in the state, with all the source read: the
result, read-only, or leaving) and `Feed.Stopped` (a watched run's run.json says it stopped before its
final event came). Textual is used through its public API only (`set_interval`, `post_message`,
`bell`, `is_running`).

Like the rest of the dashboard, this module must not import the run layer (`tuitrain.config`,
`tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`, `tuitrain.cli`): only
`tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from collections.abc import Callable

from textual.app import App
from textual.message import Message

from tuitrain.dashboard.state.bridge import EventBridge
from tuitrain.dashboard.state.changes import (
    Alerts,
    Changes,
    Checkpoints,
    Devices,
    Log,
    Media,
    NewEpisode,
    Plot,
    Progress,
    Result,
)
from tuitrain.dashboard.state.pacing import DRAIN_LIMIT, Pacer
from tuitrain.sources.run_files import Source, skipped_lines

if TYPE_CHECKING:
    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.dashboard.screens.screen import DashboardScreen


class Feed:
    """The event stream into the state (`drain`, on the host's timer) and onto `screen`: the panels
    that changed refreshed when the `pacer` says so, the once-a-second clock. `host`: the app, for its
    timers and messages. `tick`: what the drain timer calls (the app's `drain`). `watching`: the run
    trains in another process; `watching_label`: the title says "watching" (`tuitrain watch`, not a
    `Monitor`'s own viewer). `note`: the progress panel's note now (a stop asked for)."""

    class Settled(Message):
        """The run's end is in the state with everything the source read (not an earlier session's end
        read back): the app shows the result, turns a watched run read-only, or leaves."""

    @dataclass
    class Stopped(Message):
        """Watching: run.json says the run no longer runs (`status`: "killed" when its process is gone)
        before its final event is shown."""

        status: str

    def __init__(
        self,
        host: App,
        bridge: EventBridge,
        source: Source,
        pacer: Pacer,
        *,
        tick: Callable[[], None],
        interval: float,
        watching: bool,
        watching_label: bool,
        note: Callable[[], str],
        pace_clock: Callable[[], float],
        cpu_clock: Callable[[], float],
    ) -> None:
        self.host, self.bridge, self.source, self.pacer = host, bridge, source, pacer
        self.tick, self.interval, self.note = tick, interval, note
        self.watching, self.watching_label = watching, watching_label
        self.pace_clock, self.cpu_clock = pace_clock, cpu_clock  # seconds; the UI thread's CPU seconds
        self.every = interval  # the drain timer's interval now (see pacing.BUSY_DRAIN_INTERVAL)
        self.timer = None  # the drain timer, once started
        self.dirty: Changes = set()  # the kinds of change whose panels wait for a refresh (changes.py)
        self.skipped_shown = 0  # damaged lines counted in the notice
        self.work_done = False  # the source's work returned: nothing comes but what the bridge holds
        self.screen: DashboardScreen | None = None
        self.state: DashboardState | None = None

    def show_on(self, screen: DashboardScreen, state: DashboardState) -> None:
        """The screen it refreshes and the state it folds the events into (once the screen is up)."""
        self.screen, self.state = screen, state

    def start(self) -> None:
        """The timers: the drain (`tick`) and the clock."""
        self.timer = self.host.set_interval(self.every, self.tick, name="drain")
        self.host.set_interval(1.0, self.every_second, name="clock")

    def work_returned(self) -> None:
        """The source's work returned (a live run's training): its end is the run's."""
        self.work_done = True

    def relaxed(self) -> bool:
        """Nothing to give way to: paused, ended, or the run trains in another process."""
        st = self.state
        return bool(self.watching or st.ended or st.paused)

    def drain(self) -> None:
        """Fold what the bridge holds into the state and refresh the panels that changed."""
        if not self.host.is_running:  # shutting down: a timer still due finds the panels gone
            return
        st, screen = self.state, self.screen
        every = self.pacer.drain_every(self.interval, self.relaxed() or self.work_done)
        if every != self.every and self.timer is not None:
            self.timer.stop()
            self.every = every
            self.timer = self.host.set_interval(every, self.tick, name="drain")
        # read before the batch is taken: the source had handed every past event over (a resumed run's
        # earlier sessions), so this batch holds none of them
        present = getattr(self.source, "caught_up", True)
        batch = self.bridge.drain(DRAIN_LIMIT)
        if batch:
            changed = st.apply(batch)
            if Alerts in changed:
                self.dirty.add(Plot)  # the charts' marks at the alerts' steps
            if NewEpisode in changed and st.bell and not self.watching and present:  # a live alert's new
                self.host.bell()  # episode, not one read back from a past session, nor each skip of one rung for
            self.dirty |= changed
        skipped = skipped_lines(self.source)
        if skipped != self.skipped_shown:  # the one notice of damaged lines, counted
            self.skipped_shown = skipped
            screen.show_notice(skipped=skipped)
        dirty = self.dirty
        if not dirty:
            return
        now = self.pace_clock()
        pacer = self.pacer
        pacer.observe(now, self.cpu_clock(), self.relaxed())
        keep: Changes = set()  # what waits for its turn
        if Progress in dirty:
            # a change of state (paused, stopping, checkpointing, ended) shows at once; counters wait
            status = (st.activity, st.paused, st.stopping, st.checkpointing, st.final, st.epoch)
            if pacer.progress_due(now, status, st.ended):
                self.refresh_progress()
            else:
                keep.add(Progress)
        if Devices in dirty:
            screen.devices.show(st.devices, st.env)
        if Checkpoints in dirty:
            screen.checkpoints.show(st.checkpoints, st.best_file, st.monitor)
        if Media in dirty:
            screen.show_media(st)
        if Log in dirty:
            log = screen.output
            for stream, text, partial in st.take_lines():
                log.add(stream, text, partial)
            if log.count and not log.has_class("-has-lines"):
                log.add_class("-has-lines")  # the panel takes rows from its first line on
        if Plot in dirty:
            loading = not getattr(self.source, "caught_up", True)
            if pacer.plot_due(now, screen.grid.build_cost(), self.relaxed(), st.ended, loading):
                self.replot()
            else:
                keep.add(Plot)
        if Result in dirty and st.ended and (self.watching or self.work_done):
            if self.settled():
                self.host.post_message(self.Settled())
            else:  # an earlier session's end, read back: a later session may follow
                keep.add(Result)
        self.dirty = keep

    def settled(self) -> bool:
        """The state has all the source has read (a watched file to its end, a resumed run's past
        sessions): its end is the run's, not an earlier session's."""
        return getattr(self.source, "caught_up", True) and not self.bridge.pending()

    def refresh_progress(self) -> None:
        """The progress panel, the title bar, the chart area's note before the first chart, the pause button."""
        st, screen = self.state, self.screen
        screen.progress.show(st, self.note() if not st.ended else "")
        self.show_title()
        if not st.metric_names:  # the chart area's "waiting for the first metrics… (step N, phase)"
            screen.show_chart_note(st)
        screen.controls.set_paused(st.paused)

    def show_title(self) -> None:
        """The title bar: the run, where it is (a watched run: its directory as given, not the run_dir its
        events recorded, which is relative to where it was started and stays so when it is moved), live or ended."""
        where = (str(getattr(self.source, "run_dir", "") or "") if self.watching else "") or self.state.run_dir
        # "[watching]" only in `tuitrain watch`: a run in its own terminal (`Monitor`, Lightning) is "[live]"
        self.screen.show_title(self.state, where, self.watching_label)

    def replot(self) -> None:
        self.screen.grid.show(self.state)
        # the grid in place of the "waiting for the first metrics" note in this same pass, not a message later
        self.screen.show_chart_note(self.state)

    def every_second(self) -> None:
        if not self.host.is_running:  # shutting down (see drain)
            return
        self.dirty.add(Progress)  # elapsed time and ETA move without events; drain paces it
        self.screen.checkpoints.render_rows()  # ages
        if self.watching and not self.state.ended and getattr(self.source, "caught_up", False):
            self.check_alive()

    def check_alive(self) -> None:
        """Watching, caught up, no final event yet: run.json says whether the run still runs (a run that
        ended may still have a process: a script after `trainer.fit`)."""
        from tuitrain.sinks.run_status import live_status

        run_dir = getattr(self.source, "run_dir", None)
        status = "unknown" if run_dir is None else live_status(run_dir)
        if status not in ("running", "unknown"):
            self.host.post_message(self.Stopped(status))


__all__ = ["Feed"]
