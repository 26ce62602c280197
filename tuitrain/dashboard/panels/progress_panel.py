"""`ProgressPanel`: run state, the phase with its progress bar, epoch, step with the run's progress bar
(or the epoch's row, where the steps are unknown), items/s, the share of time spent waiting for data,
elapsed and ETA."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tuitrain.core.text import safe_name
from tuitrain.dashboard.fmt import format_duration, format_rate
from tuitrain.dashboard.state.model import DashboardState

# which theme colour each state is drawn in
TONES = {
    "running": "good",
    "validating": "good",
    "completed": "good",
    "checkpointing": "busy",
    "starting": "busy",
    "paused": "warn",
    "stopping": "warn",
    "interrupted": "warn",
    "failed": "bad",
    "killed": "bad",
    "reading log": "busy",  # another tool's log (state/foreign.py): its class "-reading-log"
    "log ended": "good",
}


class ProgressPanel(Static):
    """Reads `DashboardState`; `show(state)` is cheap enough for every drain."""

    COMPONENT_CLASSES = {
        "progress-panel--label",
        "progress-panel--good",
        "progress-panel--busy",
        "progress-panel--warn",
        "progress-panel--bad",
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
        #: what the bars show, (done, of): "phase" (its batches) and "run" (its steps, or its epochs)
        self.bars: dict[str, tuple[float, int]] = {}
        self._rows = -1
        self._shown: tuple = ()  # what was last shown (see `show`)

    def show(self, state: DashboardState, note: str = "") -> None:
        status = safe_name(state.status, 32)  # a phase of one's own names it
        if status != self.status:
            if self.status in TONES:  # (a phase of one's own is no class: its name may not be a class's)
                self.remove_class(f"-{self.status.replace(' ', '-')}")
            if status in TONES:  # a class for the theme: only the states it knows
                self.add_class(f"-{status.replace(' ', '-')}")
            self.status = status
        label = self.get_component_rich_style("progress-panel--label")
        tone = self.get_component_rich_style(f"progress-panel--{TONES.get(status, 'busy')}")
        grid = Table.grid(padding=(0, 1), expand=True)  # the values' column takes the width: the bars' room
        grid.add_column(style=label, no_wrap=True, min_width=5)
        grid.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        state_text = Text(status, style=tone)
        if note:
            state_text.append(f"  {note}", style=label)
        grid.add_row("State", state_text)

        # two bars, each beside the numbers it stands for: the phase's (its batches) and the run's (its
        # steps, or its epochs where the steps are unknown)
        phase = safe_name(state.phase or "-", 32)
        live = not state.ended
        if state.batches:
            phase_text = f"{phase} {min(state.batch, state.batches)}/{state.batches}"
        else:
            phase_text = f"{phase} {state.batch}" if state.batch else phase
        total = state.total_steps
        step_text = f"{state.step:,}" + (f" / {total:,}" if total else "")
        epoch_text = f"{state.epoch}" + (f"/{state.epochs}" if state.epochs else "")
        self.bars = {}
        if live and state.batches:
            self.bars["phase"] = (min(state.batch, state.batches), state.batches)
        if live and total:
            self.bars["run"] = (min(state.step, total), total)
        elif live and state.epochs:  # a run of unknown length per epoch: its epochs done
            done = max(state.epoch - 1, 0) + (
                min(state.batch, state.batches) / state.batches if state.batches and state.split == "train" else 0
            )
            self.bars["run"] = (done, state.epochs)
        run_row = "Step" if total else "Epoch"
        texts = [phase_text, step_text if total else epoch_text]
        pad = max(cell_len(t) for t in texts)  # the two bars start in one column
        padded = lambda t: t + " " * (pad - cell_len(t))  # noqa: E731
        if "phase" in self.bars:
            grid.add_row("Phase", Beside(padded(phase_text), Bar(self._share("phase"), tone)))
        else:
            grid.add_row("Phase", Text(phase_text))
        if state.epochs or state.epoch:  # a loop of one's own (Monitor) may have no epochs
            if run_row == "Epoch" and "run" in self.bars:
                grid.add_row("Epoch", Beside(padded(epoch_text), Bar(self._share("run"), tone)))
            else:
                grid.add_row("Epoch", epoch_text)
        if run_row == "Step" and "run" in self.bars:
            grid.add_row("Step", Beside(padded(step_text), Bar(self._share("run"), tone)))
        else:
            grid.add_row("Step", step_text)
        items, steps = state.rates()
        # another tool's log that records no times (Lightning's CSV): no speed, no clock, rather than a clock
        # that ticks while it reads and 0:00:00 once it has
        untimed = bool(state.tool) and not state.axes["time"]
        if untimed:
            speed = "not in this log"
        elif items is None and not state.ended:
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
        data = ""
        if wait is not None:  # the share of step time spent waiting for the next batch
            starved = wait >= 0.3 and not state.ended
            data = f"waits {wait:.0%} of the time" + (" · slow loader" if starved else "")
            if starved and len(data) > self.content_size.width - 6:  # whole words in a narrow panel
                data = f"waits {wait:.0%} · slow loader"
            grid.add_row(
                "Data", Text(data, style=self.get_component_rich_style("progress-panel--warn") if starved else "")
            )
        eta = state.eta()
        eta_text = format_duration(eta) if eta is not None else "-"
        time_text = "not in this log" if untimed else f"{format_duration(state.elapsed())}  ETA {eta_text}"
        grid.add_row("Time", time_text)
        # a layout pass re-arranges the whole screen: only when this panel's height changes (a bar that
        # has no room beside its numbers takes a line of its own)
        room = self.content_size.width - 6 - pad - 1
        rows = grid.row_count + (len(self.bars) if room < Beside.MIN_BAR else 0)
        # shown every second for the clock: an ended run's panel is what it was, and its refresh would draw the
        # screen again (under the summary dialog: the whole dimmed dashboard)
        shown = (state_text, label, tone, texts, run_row, tuple(self.bars.items()), speed, data, time_text, rows)
        shown += (self.content_size.width, self.app.theme)
        if shown == self._shown:
            return
        self._shown = shown
        self.update(grid, layout=rows != self._rows)
        self._rows = rows

    def _share(self, which: str) -> float:
        done, total = self.bars[which]
        return done / total if total else 0.0


class Bar:
    """A progress bar that takes the width it is given (a Rich renderable: no size guess needed)."""

    def __init__(self, fraction: float, style: Style) -> None:
        self.fraction = max(0.0, min(fraction, 1.0))
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(6, options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width - 5, 1)
        filled = round(self.fraction * width)
        yield Text.assemble(
            ("━" * filled, self.style), ("━" * (width - filled), "dim"), f"{self.fraction:5.0%}", no_wrap=True
        )


class Beside:
    """A row's numbers and their bar on one line: the numbers as they are, the bar in the rest (below
    them when fewer than `MIN_BAR` cells are left)."""

    MIN_BAR = 12

    def __init__(self, text: str, bar: Bar) -> None:
        self.text, self.bar = text, bar

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(cell_len(self.text), options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        room = options.max_width - cell_len(self.text) - 1
        if room < self.MIN_BAR:
            yield Text(self.text.rstrip(), no_wrap=True, overflow="ellipsis")
            yield from self.bar.__rich_console__(console, options)
            return
        line = Text(self.text + " ", no_wrap=True)
        for part in self.bar.__rich_console__(console, options.update_width(room)):
            line.append_text(part)
        yield line
