"""`ProgressPanel`: run state, phase with its progress bar, epoch, step, items/s, the share of time spent
waiting for data, elapsed and ETA."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tuitrain.core.text import safe_name
from tuitrain.dashboard.fmt import format_duration, format_rate
from tuitrain.dashboard.model import DashboardState

# which theme colour each state is drawn in
TONES = {
    "running": "good", "validating": "good", "completed": "good", "checkpointing": "busy",
    "starting": "busy", "paused": "warn", "stopping": "warn", "interrupted": "warn", "failed": "bad",
    "killed": "bad",
}


class ProgressPanel(Static):
    """Reads `DashboardState`; `show(state)` is cheap enough for every drain."""

    COMPONENT_CLASSES = {
        "progress-panel--label", "progress-panel--good", "progress-panel--busy",
        "progress-panel--warn", "progress-panel--bad",
    }

    DEFAULT_CSS = """
    ProgressPanel { height: auto; }
    ProgressPanel > .progress-panel--label { text-style: dim; }
    ProgressPanel > .progress-panel--good { color: green; text-style: bold; }
    ProgressPanel > .progress-panel--busy { color: cyan; text-style: bold; }
    ProgressPanel > .progress-panel--warn { color: yellow; text-style: bold; }
    ProgressPanel > .progress-panel--bad { color: red; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes)
        self.status = ""
        self._rows = -1

    def show(self, state: DashboardState, note: str = "") -> None:
        status = safe_name(state.status, 32)  # a phase of one's own names it
        if status != self.status:
            self.remove_class(f"-{self.status}")
            if status in TONES:  # a class for the theme: only the states it knows
                self.add_class(f"-{status}")
            self.status = status
        label = self.get_component_rich_style("progress-panel--label")
        tone = self.get_component_rich_style(f"progress-panel--{TONES.get(status, 'busy')}")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style=label, no_wrap=True, min_width=5)
        grid.add_column(no_wrap=True, overflow="ellipsis")
        state_text = Text(status, style=tone)
        if note:
            state_text.append(f"  {note}", style=label)
        grid.add_row("State", state_text)

        phase = safe_name(state.phase or "-", 32)
        if state.batches:
            grid.add_row("Phase", Text(f"{phase} {min(state.batch, state.batches)}/{state.batches}"))
        else:
            grid.add_row("Phase", Text(f"{phase} {state.batch}" if state.batch else phase))
        if state.epochs or state.epoch:  # a loop of one's own (Monitor) may have no epochs
            epochs = f"/{state.epochs}" if state.epochs else ""
            grid.add_row("Epoch", f"{state.epoch}{epochs}")
        total = state.total_steps
        grid.add_row("Step", f"{state.step:,}" + (f" / {total:,}" if total else ""))
        items, steps = state.rates()
        if items is None and not state.ended:
            speed = "warming up"
        else:
            rates = []
            if state.batch_size:  # unknown to a loop of one's own that did not give it
                rates.append(f"{format_rate(items)} items/s")
            if steps is not None:
                rates.append(f"{format_rate(steps)} it/s")
            speed = " · ".join(rates) or "-"
        grid.add_row("Speed", speed)
        wait = state.latest.get("train/data_wait")
        if wait is not None:  # the share of step time spent waiting for the next batch
            starved = wait >= 0.3 and not state.ended
            grid.add_row("Data", Text(f"waits {wait:.0%} of the time" + (" · slow loader" if starved else ""),
                                      style=self.get_component_rich_style("progress-panel--warn") if starved else ""))
        eta = state.eta()
        grid.add_row("Time", f"{format_duration(state.elapsed())}  ETA {format_duration(eta) if eta is not None else '-'}")
        bar = None
        if state.batches and not state.ended:
            bar = Bar(state.batch / state.batches, tone)
        elif total and not state.ended:
            bar = Bar(state.step / total, tone)
        # a layout pass re-arranges the whole screen: only when this panel's height changes
        rows = grid.row_count + (bar is not None)
        self.update(Group(grid, bar) if bar is not None else grid, layout=rows != self._rows)
        self._rows = rows


class Bar:
    """A progress bar that takes the width it is given (a Rich renderable: no size guess needed)."""

    def __init__(self, fraction: float, style: Style) -> None:
        self.fraction = max(0.0, min(fraction, 1.0))
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(6, options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width - 6, 1)
        filled = round(self.fraction * width)
        yield Text.assemble(("━" * filled, self.style), ("━" * (width - filled), "dim"), f" {self.fraction:5.0%}")
