"""`ResultScreen`: shown when training ends: the summary table, or the error and its traceback."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from tuitrain.core.text import safe_text
from tuitrain.dashboard.fmt import format_duration, format_summary_text, format_value
from tuitrain.dashboard.state.foreign import LOG_ENDED, tool_label
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.dashboard.screens.modal import Modal
from tuitrain.sinks.run_status import KILLED


REASONS = {
    "epochs": "all epochs done",
    "max_steps": "max_steps reached",
    "early_stopping": "early stopping",
    "stopped": "stopped on request",
    "max_time": "max_time spent",
}
#: failures whose one line says it all: their traceback (a sink's, an allocator's) helps nobody
PLAIN_CAUSES = {"write_failed": "the run directory could not be written", "out_of_memory": "out of memory"}


def result_title(state: DashboardState) -> str:
    return safe_text(_title(state), lines=False)


def _title(state: DashboardState) -> str:
    if state.failed is not None:
        return f"Training failed: {state.failed.error}"
    if state.final == "interrupted":
        return "Training stopped"
    if state.final == KILLED:
        return "Training killed: the run's process is gone"
    if state.finished is None:  # work returned without a final event: how it ended is not known
        return "Training ended"
    if state.final == LOG_ENDED:  # another tool's log read to its end: how its training ended is not known
        return f"{tool_label(state.tool)} log read to its end"
    if getattr(state, "tool", ""):  # MLflow's, W&B's own record of the run's end
        return f"{tool_label(state.tool)} says the run finished"
    return "Training completed"


def result_body(state: DashboardState, exit_code: int | None) -> str:
    """The text under the title; plain so that tests can read it, and safe for a screen."""
    return safe_text(_body(state, exit_code))


def _duration(state: DashboardState, session: float | None) -> str:
    """How long the run trained: this session; a resumed run's training time over all its sessions
    (the gaps between them left out), this session's too."""
    sessions, total = state.sessions, state.elapsed()
    if sessions > 1 and total is not None:
        return f"{format_duration(total)} in {sessions} sessions (this one {format_duration(session)})"
    return format_duration(session)


def _body(state: DashboardState, exit_code: int | None) -> str:
    lines: list[str] = []
    code = f" · exit code {exit_code}" if exit_code is not None else ""
    if state.failed is not None:
        f = state.failed
        duration = f.duration or state.elapsed()  # a failure early in set-up may not know its duration
        lines.append(f"epoch {f.epoch} · step {f.step} · {_duration(state, duration)}{code}")
        cause = getattr(f, "cause", "")
        checkpoint = getattr(f, "checkpoint", "")
        if cause in PLAIN_CAUSES or checkpoint:
            lines.append(f"last complete checkpoint: {checkpoint or 'none'}")  # a path with its run directory
        table = format_summary_text(f.summary) if f.summary else ""
        if table:
            lines += ["", table]
        if cause in PLAIN_CAUSES:
            lines += [
                "",
                f"{PLAIN_CAUSES[cause]}: {f.error}",
                "(the traceback, where it could be written, is in experiment.log)",
            ]
        else:
            lines += ["", f.traceback.rstrip() or f.error]
        return "\n".join(lines)
    fin = state.finished
    if fin is not None:
        epoch = f"epoch {fin.epoch} · " if fin.epoch or state.epochs else ""  # Monitor's loop has none
        if getattr(state, "tool", ""):  # another tool's log: its last step, the time its records span (no
            # exit code: the reader's is not the training's)
            why = f"{REASONS.get(fin.reason, fin.reason)} · " if fin.reason else ""
            # a log with no times (Lightning's CSV) says no span
            span = f" · {format_duration(fin.duration)} from its first record to its last" if fin.duration > 0 else ""
            lines.append(f"{why}{epoch}step {fin.step:,}{span}")
            return "\n".join(lines)
        lines.append(
            f"{REASONS.get(fin.reason, fin.reason)} · {epoch}step {fin.step} · {_duration(state, fin.duration)}{code}"
        )
        best = fin.best or {}
        if best.get("file"):
            value = best.get("value")
            shown = f" ({best.get('monitor') or 'monitor'} = {format_value(value)})" if value is not None else ""
            lines.append(f"best checkpoint: {checkpoint_path(state, best['file'])}{shown}")
        table = format_summary_text(fin.summary)
        if table:
            lines += ["", table]
    else:
        epoch = f"epoch {state.epoch} · " if state.epoch or state.epochs else ""
        how = "killed · " if state.final == KILLED else ""
        lines.append(f"{how}{epoch}step {state.step} · {_duration(state, state.elapsed())}{code}")
        lines.append("the run ended without a final event" + (" (its process was killed)" if how else ""))
        newest = state.checkpoints[0]["file"] if state.checkpoints else ""
        if state.best_file:
            lines.append(f"best checkpoint: {checkpoint_path(state, state.best_file)}")
        if newest and newest != state.best_file:
            lines.append(f"last checkpoint: {checkpoint_path(state, newest)}")
    return "\n".join(lines)


def checkpoint_path(state: DashboardState, file: str) -> str:
    """A checkpoint as the user can open it from here: its file (relative to the run directory) under
    the run directory as this process names it (the watched folder, or the run's own `run_dir`)."""
    where = state.files_dir or (Path(state.run_dir) if state.run_dir else None)
    if where is None or Path(file).is_absolute():
        return file
    return str(Path(where) / file)


#: the chart keys (SPEC "Dashboard": they act on the first chart when none has the focus, as right
#: after the dashboard opens, which for an ended run is under this screen)
CHART_KEYS = ("l", "s", "x", "w", "e", "i", "enter")


class ResultScreen(Modal[str | None]):
    """Stays until the user leaves (q) or goes back to the dashboard (Escape, or a chart key: the
    screen is dismissed with the key, for the dashboard to act on: see `Ending.show_result`)."""

    BINDINGS = [
        Binding("q", "app.leave", "Leave"),
        Binding("y", "app.leave", "Leave", show=False),
        Binding("escape", "dismiss", "Dashboard"),
        Binding("question_mark", "app.help", "Keys", show=False),
    ] + [Binding(key, f"to_charts({key!r})", show=False) for key in CHART_KEYS]

    DEFAULT_CSS = """
    ResultScreen { align: center middle; }
    #result-box { width: 90%; max-width: 110; height: auto; max-height: 90%; padding: 0 1; }
    #result-scroll { height: auto; max-height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 1; }
    #result-title, #result-keys { height: auto; }
    """

    def __init__(self, state: DashboardState, exit_code: int | None) -> None:
        super().__init__()
        self.state = state
        self.exit_code = exit_code
        self.title_text = result_title(state)
        self.body_text = result_body(state, exit_code)

    def compose(self) -> ComposeResult:
        kind = "failed" if self.state.failed is not None else self.state.final or "completed"
        kind = "completed" if kind == LOG_ENDED else kind  # (a class name: no space)
        with Vertical(id="result-box", classes=f"-{kind}"):
            yield Static(Text(self.title_text), id="result-title")
            with VerticalScroll(id="result-scroll"):
                yield Static(Text(self.body_text), id="result-body")
            yield Static("q leave · Esc back to the dashboard · r this summary again", id="result-keys")

    def action_to_charts(self, key: str) -> None:
        """A chart key: back to the dashboard, where the key acts on the charts."""
        self.dismiss(key)
