"""`DashboardScreen`: the dashboard's one screen. It composes the widgets (the title bar, the chart
grid with its note and the output panel, the side panels, the control bar and notice, the footer),
titles the panels, lays them out for the terminal's size (`COMPACT`, `TOO_SMALL`), and shows what
it is given: the title bar and the footer in the words that fit its width (fitting.py), the notice,
the panels' contents. It holds no run: `DashboardApp` (tuitrain/dashboard/app.py) owns the state
and tells the screen what to show.

Keys: the chart keys are `ChartGrid`'s bindings (tuitrain/dashboard/charts/chart_grid.py), the
run's keys the app's. The grid's keys act wherever the focus is on this screen (a button, the run
list, nothing), as they did when they were the app's: the screen binds them too, each to the grid's
own action (`chart_key`), so that with the focus outside the grid they are found on the screen, after
the focused widget's own keys and before the app's (Textual's public `BINDINGS`, no reaching into its
binding chain); `active_bindings` keeps the footer in its order (the run's keys, then the chart keys,
then the app's others).

Like the rest of the dashboard, this module must not import the run layer (`tuitrain.config`,
`tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`, `tuitrain.cli`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.fitting import footer_bindings, title_line, words_within
from tuitrain.dashboard.state.foreign import READING
from tuitrain.dashboard.layout import COMPACT, TOO_SMALL
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.dashboard.charts.chart_note import ChartNote
from tuitrain.dashboard.panels.checkpoint_list import CheckpointList
from tuitrain.dashboard.panels.control_bar import ControlBar
from tuitrain.dashboard.panels.devices_panel import DevicesPanel
from tuitrain.dashboard.panels.key_footer import KeyFooter
from tuitrain.dashboard.panels.output_log import OutputLog
from tuitrain.dashboard.panels.progress_panel import ProgressPanel
from tuitrain.dashboard.panels.run_list import RunList
from tuitrain.dashboard.panels.samples_panel import SamplesPanel


def run_state(state) -> str:
    """The header's word for the run: live, paused, completed, interrupted, failed (or killed)."""
    if state.final:
        return state.final
    if getattr(state, "reading", False):  # a foreign log whose writer stopped: not live (foreign.py)
        return READING
    return "paused" if state.paused else "live"


def notice_text(text: str, skipped: int = 0, room: int = 0) -> Text:
    """The bottom bar's line: `text` as typed (never markup), after the count of damaged lines skipped; in
    `room` cells (0: any), its last " · " parts left out first, then its last words (cut mid-word only where its
    first word alone is wider)."""
    if skipped:  # one notice for every damaged line skipped, however many
        text = f"{skipped} damaged line{'s' if skipped != 1 else ''} of events.jsonl skipped" + (
            f" · {text}" if text else ""
        )
    text = safe_text(text, lines=False)
    parts = text.split(" · ")
    while room and len(parts) > 1 and cell_len(text) > room:
        parts.pop()
        text = " · ".join(parts)
    # a first word longer than the bar (a path) is cut by Rich, rather than the notice going blank
    return Text((words_within(text, room) if room else "") or text, no_wrap=True, overflow="ellipsis")


class Notice(Static):
    """The bottom bar's line (`notice_text`) in the words that fit the bar's width as it is now."""

    def __init__(self, text: str, skipped: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.said = (text, skipped)

    def say(self, text: str, skipped: int) -> None:
        self.said = (text, skipped)
        self.refresh()

    def render(self) -> Text:
        return notice_text(*self.said, room=self.content_region.width)


class DashboardScreen(Screen):
    """The widgets of one run's dashboard (or of runs compared: `comparing` adds the run list)."""

    AUTO_FOCUS = ""  # nothing focused at first: the chart keys act on the first chart (SPEC "Dashboard")
    #: the chart keys, each the grid's own action (`action_chart_key`): with the focus outside the grid
    #: they are found here; inside it, the grid's own come first (Tab and Shift+Tab, the grid's priority
    #: keys, replace the screen's focus keys, as they did)
    BINDINGS = [replace(b, action=f"chart_key({b.key!r})") for b in ChartGrid.CHART_KEYS] + [
        # the samples panel's step slider, wherever the focus is (shown once the run has logged a sample)
        Binding("left_square_bracket", "media_step(-1)", "Older"),
        Binding("right_square_bracket", "media_step(1)", "Newer"),
    ]
    #: the keys bound here for the grid and the samples (the footer shows them after the run's keys)
    CHART_KEYS = frozenset(b.key for b in ChartGrid.CHART_KEYS) | {"left_square_bracket", "right_square_bracket"}

    def __init__(
        self,
        *,
        comparing: bool = False,
        clock: Callable[[], float],
        notice: str = "",
        skipped: int = 0,
        footer_after: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.comparing = comparing
        self.clock = clock  # the checkpoint list's ages
        self._notice, self._skipped = notice, skipped  # the notice's words, and the damaged lines it counts
        #: the app's keys the footer shows after the chart keys (the others come before them)
        self.footer_after = footer_after
        self._title_shown: tuple | None = None
        self._title_of: tuple | None = None  # show_title's arguments, for a resize
        self._grid: ChartGrid | None = None
        #: set once the widgets are mounted (the app waits for it before it shows anything)
        self.composed = asyncio.Event()

    def compose(self) -> ComposeResult:
        # the screen's classes for its runs and the terminal's size before its widgets are mounted: each widget
        # then takes its styles once, as it mounts (set on the mounted screen, they matched every widget's
        # styles again: a sixth of the screen's start on a compact terminal)
        self.set_class(self.comparing, "-compare")
        self.fit(self.app.size.width, self.app.size.height)
        yield Static(id="title-bar")
        with Horizontal(id="main"):
            with Vertical(id="plot-column"):
                yield ChartGrid(id="charts")
                yield ChartNote(id="chart-note")
                with Horizontal(id="lower"):  # no rows until the run logs a sample or prints a line
                    yield SamplesPanel(id="samples", classes="panel")
                    yield OutputLog(id="log", classes="panel")
            with VerticalScroll(id="side", can_focus=False):  # the keys are the charts'; the wheel scrolls it
                if self.comparing:  # the run list takes the side column (the panels below are one run's)
                    yield RunList(id="runs", classes="panel")
                yield ProgressPanel(id="progress", classes="panel")
                yield DevicesPanel(id="devices", classes="panel")
                yield CheckpointList(clock=self.clock, id="checkpoints", classes="panel")
        with Horizontal(id="bottom-bar"):
            yield ControlBar(id="controls")
            yield Notice(self._notice, self._skipped, id="notice")
        yield Static(
            "The terminal is too small for the dashboard: make it larger (at least 50x12).\n"
            "Training goes on; q leaves.",
            id="too-small",
        )
        yield KeyFooter()

    def on_mount(self) -> None:
        self._grid = self.query_one(ChartGrid)
        self._grid.also = [self.samples]  # Tab and the arrows reach the samples panel after the charts
        self.query_one("#log").border_title = "output"
        self.query_one("#progress").border_title = "progress"
        self.query_one("#devices").border_title = "devices"
        self.query_one("#checkpoints").border_title = "checkpoints"
        self.set_class(self.comparing, "-compare")
        self.fit(self.app.size.width, self.app.size.height)
        self.show_chart_note()
        self.composed.set()

    # --- the terminal's size ---------------------------------------------------------------

    def on_resize(self, event: events.Resize) -> None:
        self.fit(event.size.width, event.size.height)
        if self._title_of is not None:  # the title bar's words follow the width
            self.show_title(*self._title_of)
        # and the footer's words (KeyFooter builds its keys again only where the width changed them: a
        # terminal dragged wider sends many resizes)
        self.refresh_bindings()

    def fit(self, width: int, height: int) -> None:
        """Small terminals: the side panels shrink (`-compact`); too small: a notice (`-too-small`)."""
        compact = width < COMPACT[0] or height < COMPACT[1]
        too_small = width < TOO_SMALL[0] or height < TOO_SMALL[1]
        if (compact, too_small) != (self.has_class("-compact"), self.has_class("-too-small")):
            # both at once, then the screen's styles matched again once (each is every widget's)
            self.set_class(compact, "-compact", update=False)
            self.set_class(too_small, "-too-small", update=False)
            self.update_node_styles()

    def _watch_maximized(self, previously_maximized: Widget | None, maximized: Widget | None) -> None:
        """Enter (a chart alone) and back: Textual's watcher, but the screen's `-maximized-view` class restyles
        the screen alone. Textual's set_class matched every widget's styles again (a third of a second of
        a core on a large terminal, each way); the only rules that read the class are Textual's
        `Screen.-maximized-view` (the screen's own) and `Screen.-maximized-view .-maximized` (the widget
        shown alone, restyled below by its own class)."""
        view = maximized is not None
        if self.has_class("-maximized-view") != view:
            self.set_class(view, "-maximized-view", update=False)
            self.app.stylesheet.update_nodes([self], animate=True)
        if previously_maximized is not None:
            previously_maximized.remove_class("-maximized")
        if maximized is not None:
            maximized.add_class("-maximized")

    # --- the widgets, for the app ----------------------------------------------------------

    @property
    def grid(self) -> ChartGrid:
        return self._grid if self._grid is not None else self.query_one(ChartGrid)

    @property
    def progress(self) -> ProgressPanel:
        return self.query_one(ProgressPanel)

    @property
    def devices(self) -> DevicesPanel:
        return self.query_one(DevicesPanel)

    @property
    def checkpoints(self) -> CheckpointList:
        return self.query_one(CheckpointList)

    @property
    def output(self) -> OutputLog:
        return self.query_one(OutputLog)

    @property
    def controls(self) -> ControlBar:
        return self.query_one(ControlBar)

    @property
    def samples(self) -> SamplesPanel:
        return self.query_one(SamplesPanel)

    def show_media(self, state) -> None:
        """The samples panel: the run's logged images and texts (it takes its rows from the first one
        on), their paths the run directory's as this dashboard reads it (a watched run's folder)."""
        media = state.media
        if state.kind != "run" or not media:
            return
        root = state.files_dir or (Path(state.run_dir) if state.run_dir else None)
        first = not self.samples.has_class("-has-media")
        if first:
            self.samples.add_class("-has-media")
            self.query_one("#lower").add_class("-has-media")
            self.refresh_bindings()  # [ and ] join the footer
        self.samples.show(media, root)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """[ and ] only once the run has logged a sample (before, the footer is as it was)."""
        if action == "media_step":
            return self.samples.has_class("-has-media")
        return True

    def action_media_step(self, delta: int) -> None:
        self.samples.step(delta)

    # --- the title bar and the notice ------------------------------------------------------

    def show_notice(self, text: str | None = None, skipped: int | None = None) -> None:
        """The bottom bar's line: `text` (None: as it was) after the count of damaged lines `skipped`
        (None: as it was)."""
        if text is not None:
            self._notice = text
        if skipped is not None:
            self._skipped = skipped
        self.query_one("#notice", Notice).say(self._notice, self._skipped)

    def show_chart_note(self, state=None) -> None:
        """The chart area's note (`ChartNote`): before the first chart, what the run is doing (`state`:
        its step and phase); with charts out of view, how many (as the grid last laid them out) and the
        keys that reach them."""
        grid = self.grid
        state = state if state is not None else grid.state
        shown = len(grid.visible())  # now: the grid takes the area in the pass that gives it its charts
        above, below = grid.view[1:] if shown else (0, 0)
        # the note takes the chart area: nothing empty (the grid's own display, not a class on the screen, which
        # had Textual match every widget's styles again: a ninth of the dashboard's start)
        grid.display = bool(shown)
        self.query_one(ChartNote).show(state, shown, above, below, grid.filter_text)

    def on_chart_grid_view_changed(self, message: ChartGrid.ViewChanged) -> None:
        self.show_chart_note()

    def show_title(self, state, where: str, watching: bool) -> None:
        """The first row: the run's name, where it is, live/paused/ended, and its alerts (one run);
        compared runs: the legend of the shown ones (see `show_runs`)."""
        if state.kind != "run":
            self.show_runs(state)
            return
        self._title_of = (state, where, watching)
        name = safe_name(state.experiment or "tuitrain", 40)  # the first row shows the run, whatever it is named
        where = safe_name(where, 60)
        mode = run_state(state)
        if watching:
            mode = f"watching · {mode}"
        alerts = len(state.episodes)  # counted by episode: a burst of skips is one (SPEC "Health")
        newest = state.alerts[-1].title if alerts else ""
        infos = state.infos
        width = self.size.width or self.app.size.width
        key = (name, where, mode, alerts, newest, len(infos), width)
        if key == self._title_shown:
            return
        self._title_shown = key
        head, tail, style, sep = "", "", "", ": "
        if alerts:  # the header's colour says the run needs a look; the output panel lists them
            head, tail, style = (
                f"⚠ {alerts} alert{'s' if alerts != 1 else ''}",
                safe_text(newest, lines=False),
                "bold",
            )
        elif infos:  # a script's "info" alerts: said, the header not coloured
            head, tail, sep = "ℹ", safe_text(infos[-1].title, lines=False), " "
        bar = self.query_one("#title-bar", Static)
        bar.set_class(bool(alerts), "-alerting")
        # one line, always: shortened to the terminal's width, the alert's text ellipsised at a word
        bar.update(title_line(name, where, mode, width, head, tail, style, sep), layout=False)

    def show_runs(self, state) -> None:
        """Compared runs: the title bar's legend (the runs shown, pinned first) and the run list."""
        from tuitrain.dashboard.state.compare import run_color

        st = state
        shown = st.shown_runs()
        for run_list in self.query(RunList):
            run_list.show(st)
        headline = st.headline()
        if headline:  # a sweep: what it searches and how far it got (the trials are the run list's)
            if ("headline", headline) != self._title_shown:
                self._title_shown = ("headline", headline)
                self.query_one("#title-bar", Static).update(
                    Text(safe_text(headline, lines=False), style="bold", no_wrap=True, overflow="ellipsis"),
                    layout=False,
                )
            return
        key = ("compare", tuple(shown), tuple(r.final for r in st.runs.values()), tuple(st.pinned))
        if key == self._title_shown:
            return
        self._title_shown = key
        count = f"{len(st.runs)} runs" if len(shown) == len(st.runs) else f"{len(shown)} of {len(st.runs)} runs"
        text = Text(f" comparing {count} ", style="bold")
        for name in shown:
            i = st.number[name]
            text.append(
                f"  {'◆' if name in st.pinned else '━'}{i} {safe_name(name, 32)}",
                style="#%02x%02x%02x" % run_color(i - 1),
            )
            text.append(f" [{st.status_of(name)}]", style="dim")
        if not shown:
            text.append("  none shown: R, then a shows every run", style="dim")
        self.query_one("#title-bar", Static).update(text, layout=False)

    # --- the chart keys --------------------------------------------------------------------

    async def action_chart_key(self, key: str) -> None:
        """A chart key pressed with the focus outside the grid: the grid's action for it."""
        await self.grid.press(key)

    @property
    def active_bindings(self):
        """The keys in the footer's order: the focused widget's own, then the app's run keys, the chart
        grid's, and the app's `footer_after` keys last; in the words that fit (`footer_bindings`)."""
        return self._fitted(self.size.width or self.app.size.width)

    def _fitted(self, width: int):
        bindings = super().active_bindings
        app = self.app

        def place(item) -> int:
            key, active = item
            if isinstance(active.node, ChartGrid) or (active.node is self and key in self.CHART_KEYS):
                return 2
            if active.node is app:
                return 3 if key in self.footer_after else 1
            return 0

        ordered = dict(sorted(bindings.items(), key=place))  # stable: each group keeps its order
        # shorter words, then fewer keys, rather than a footer cut off at the terminal's edge
        return footer_bindings(ordered, width, app.get_key_display)


__all__ = ["DashboardScreen", "notice_text", "run_state"]
