"""The dashboard's layout: the widgets it composes, their titles and theme, the title bar, and how
the screen gives way in small terminals (`COMPACT`, `TOO_SMALL`); the theme helpers
`default_theme` and `base_theme_of`, and the built-in `HIGH_CONTRAST` theme.

`LayoutMixin` is one part of `DashboardApp` (tuitrain/dashboard/app.py) and works on its
attributes. Like the rest of the dashboard, this module must not import the run layer
(`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`,
`tuitrain.cli`): only `tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

import re
from pathlib import Path

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.theme import Theme
from textual.widgets import Footer, Static

from tuitrain.core.text import safe_name, safe_text
from tuitrain.dashboard.widgets.checkpoint_list import CheckpointList
from tuitrain.dashboard.widgets.control_bar import ControlBar
from tuitrain.dashboard.widgets.devices_panel import DevicesPanel
from tuitrain.dashboard.widgets.chart_grid import ChartGrid
from tuitrain.dashboard.widgets.output_log import OutputLog
from tuitrain.dashboard.widgets.progress_panel import ProgressPanel
from tuitrain.dashboard.widgets.run_list import RunList

DASHBOARD_TCSS = Path(__file__).with_name("dashboard.tcss")
COMPACT = (100, 32)  # below this width or height the side panels shrink
TOO_SMALL = (50, 12)  # below this the dashboard gives way to a notice

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


def run_state(state) -> str:
    """The header's word for the run: live, paused, completed, interrupted, failed (or killed)."""
    if state.final:
        return state.final
    return "paused" if state.paused else "live"


class LayoutMixin:
    """`DashboardApp`'s widgets and how they are laid out, titled and themed."""

    def compose(self) -> ComposeResult:
        yield Static(id="title-bar")
        with Horizontal(id="main"):
            with Vertical(id="plot-column"):
                yield ChartGrid(id="charts")
                yield OutputLog(id="log", classes="panel")
            with VerticalScroll(id="side"):
                if self.comparing:  # the run list takes the side column (the panels below are one run's)
                    yield RunList(id="runs", classes="panel")
                yield ProgressPanel(id="progress", classes="panel")
                yield DevicesPanel(id="devices", classes="panel")
                yield CheckpointList(clock=self.clock, id="checkpoints", classes="panel")
        with Horizontal(id="bottom-bar"):
            yield ControlBar(id="controls")
            yield Static(self._notice_text(self.notice), id="notice")
        yield Static("The terminal is too small for the dashboard: make it larger (at least 50x12).\n"
                     "Training goes on; q leaves.", id="too-small")
        yield Footer()

    @property
    def comparing(self) -> bool:
        """Several runs watched (`tuitrain watch A B`, an experiment folder)."""
        return bool(getattr(self.state, "runs", None))

    def set_notice(self, text: str) -> None:
        """The bottom bar's one line of notice (shown as typed, never as markup)."""
        self.notice = text
        self.query_one("#notice", Static).update(self._notice_text(text))

    def _notice_text(self, text: str) -> Text:
        skipped = self.skipped_lines()
        if skipped:  # one notice for every damaged line skipped, however many
            text = f"{skipped} damaged line{'s' if skipped != 1 else ''} of events.jsonl skipped" + \
                (f" · {text}" if text else "")
        return Text(safe_text(text, lines=False), no_wrap=True, overflow="ellipsis")

    def skipped_lines(self) -> int:
        """Lines of the run's events.jsonl (or the compared runs') left out as damaged."""
        readers = getattr(self.source, "readers", None)
        sources = readers.values() if isinstance(readers, dict) else [self.source]
        return sum(getattr(s, "bad_lines", 0) for s in sources)

    def _set_up_panels(self) -> None:
        """On mount: the theme, the panels' titles, the layout for the terminal's size, and the
        control bar off when nothing can be steered."""
        if self._base_theme == HIGH_CONTRAST.name:
            self.register_theme(HIGH_CONTRAST)
        try:
            self.theme = self._base_theme
        except Exception:
            self.theme = "textual-dark"  # an unknown base theme name must not stop the dashboard
        self.query_one("#log").border_title = "output"
        self.query_one("#progress").border_title = "progress"
        self.query_one("#devices").border_title = "devices"
        self.query_one("#checkpoints").border_title = "checkpoints"
        self.set_class(self.comparing, "-compare")
        self._title()
        self._layout_for(self.size.width, self.size.height)
        if self.controller is None:
            self.steering_changed()

    def on_resize(self, event: events.Resize) -> None:
        self._layout_for(event.size.width, event.size.height)

    def _layout_for(self, width: int, height: int) -> None:
        self.set_class(width < COMPACT[0] or height < COMPACT[1], "-compact")
        self.set_class(width < TOO_SMALL[0] or height < TOO_SMALL[1], "-too-small")

    def _title(self) -> None:
        st = self.state
        runs = getattr(st, "runs", None)
        if runs:  # compared runs: the legend of the shown ones' colours, and the run list
            self._show_runs()
            return
        name = safe_name(st.experiment or "tuitrain", 40)  # the first row shows the run, whatever it is named
        where = safe_name(st.run_dir or (str(getattr(self.source, "run_dir", "")) if self.watching else ""), 60)
        mode = run_state(st)
        if self.watching:
            mode = f"watching · {mode}"
        alerts = len(getattr(st, "alerts", ()))
        key = (name, where, mode, alerts)
        if key == self._title_shown:
            return
        self._title_shown = key
        text = Text.assemble((f" {name}", "bold"), f"  {where}" if where else "", f"  [{mode}]")
        bar = self.query_one("#title-bar", Static)
        if alerts:  # the header's colour says the run needs a look; the output panel lists them
            last = st.alerts[-1]
            text.append(f"  ⚠ {alerts} alert{'s' if alerts != 1 else ''}: {safe_text(last.title, lines=False)}",
                        style="bold")
        bar.set_class(bool(alerts), "-alerting")
        bar.update(text, layout=False)  # one line, always

    def _show_runs(self) -> None:
        """Compared runs: the title bar's legend (the runs shown, pinned first) and the run list."""
        from tuitrain.dashboard.compare import run_color

        st = self.state
        shown = st.shown_runs()
        for run_list in self.query(RunList):
            run_list.show(st)
        key = ("compare", tuple(shown), tuple(r.final for r in st.runs.values()), tuple(st.pinned))
        if key == self._title_shown:
            return
        self._title_shown = key
        count = f"{len(st.runs)} runs" if len(shown) == len(st.runs) else f"{len(shown)} of {len(st.runs)} runs"
        text = Text(f" comparing {count} ", style="bold")
        for name in shown:
            i = st.number[name]
            text.append(f"  {'◆' if name in st.pinned else '━'}{i} {safe_name(name, 32)}",
                        style="#%02x%02x%02x" % run_color(i - 1))
            text.append(f" [{st.status_of(name)}]", style="dim")
        if not shown:
            text.append("  none shown: R, then a shows every run", style="dim")
        self.query_one("#title-bar", Static).update(text, layout=False)
