"""`ExperimentLog`: the run's human-readable `experiment.log`.

One line per fact, `YYYY-MM-DD HH:MM:SS.mmm LEVEL message` in local time from the event's time;
a message of several lines (a traceback, the summary table) continues on lines indented by four
spaces. What the user's code printed or logged comes one line per printed line, tagged with its
stream: `[stdout] ...`. Appended (a resumed run continues the same file) and flushed per write, so
the file survives `kill -9` up to its last line. Must not import torch or textual.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tuitrain.core.events import (
    CheckpointDeleted,
    CheckpointFailed,
    CheckpointSaved,
    ControlReceived,
    EpochCompleted,
    AlertRaised,
    EpochStarted,
    Event,
    OutputPrinted,
    RolledBack,
    StepSkipped,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
)
from tuitrain.core.text import alert_line, safe_text
from tuitrain.sinks.summary import format_bytes, format_duration, format_metric, format_summary_table, format_value

FILENAME = "experiment.log"


def _timestamp(t: float) -> str:
    lt = time.localtime(t)
    return time.strftime("%Y-%m-%d %H:%M:%S", lt) + f".{int((t % 1) * 1000):03d}"


def _env_summary(env: dict[str, Any]) -> str:
    parts = []
    for key, value in env.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
        parts.append(f"{key}={text}")
    return ", ".join(parts)


def _metrics_text(metrics: dict[str, Any]) -> str:
    return " · ".join(f"{k} {format_metric(k, v)}" for k, v in metrics.items())


class ExperimentLog:
    """Appends a readable account of the run to `run_dir/experiment.log`."""

    stores_run = True  # a failed write (a full disk) ends the run: see EventBus.on_write_failure
    step_events = False  # the EventBus spares it StepStarted/StepCompleted: it ignores them
    batch_events = True  # it may get the frequent events in batches (EventBus)

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / FILENAME
        self._file = open(self.path, "a", encoding="utf-8", newline="\n", buffering=1)

    def write(self, message: str, level: str = "INFO", t: float | None = None) -> None:
        """One entry; extra lines of `message` are indented under the first."""
        if self._file.closed:
            return
        first, *rest = safe_text(message).split("\n")  # what the user's code named or printed: never obeyed
        lines = [f"{_timestamp(time.time() if t is None else t)} {level:<5} {first}"]
        lines += ["    " + line for line in rest]
        self._file.write("\n".join(lines) + "\n")
        self._file.flush()

    def __call__(self, event: Event, state: object = None) -> None:
        t = getattr(event, "time", None)
        match event:
            case RunStarted():
                self.write(f"run started: experiment {event.experiment!r} in {event.run_dir} (pid {event.pid})", t=t)
                if event.resumed_from:
                    self.write(
                        f"resumed from {event.resumed_from} at epoch {event.start_epoch}, step {event.start_step}", t=t
                    )
                limits = f"epochs {event.epochs}, steps per epoch {event.steps_per_epoch or 'unknown'}"
                if event.max_steps:
                    limits += f", max_steps {event.max_steps}"
                self.write(f"{limits}, batch size {event.batch_size}", t=t)
                if event.env:
                    self.write(f"env: {_env_summary(event.env)}", t=t)
            case EpochStarted(epoch=epoch, epochs=epochs, step=step):
                self.write(f"epoch {epoch}/{epochs} started at step {step}", t=t)
            case EpochCompleted(epoch=epoch, epochs=epochs, step=step, metrics=metrics, duration=duration):
                text = f"epoch {epoch}/{epochs} done in {format_duration(duration)} at step {step}"
                self.write(text + (f": {_metrics_text(metrics)}" if metrics else ""), t=t)
            case CheckpointSaved():
                best = ", best" if event.best else ""
                self.write(
                    f"checkpoint saved: {event.file} ({format_bytes(event.bytes)}, epoch {event.epoch}, "
                    f"step {event.step}, {event.reason}{best}; stall {event.stall:.3f}s, "
                    f"write {event.write:.3f}s)",
                    t=t,
                )
            case CheckpointFailed():
                self.write(
                    f"checkpoint failed at epoch {event.epoch}, step {event.step} ({event.reason}): {event.error}",
                    level="WARN",
                    t=t,
                )
            case CheckpointDeleted(file=file):
                self.write(f"checkpoint deleted: {file}", t=t)
            case ControlReceived(command=command, source=source, detail=detail):
                self.write(f"control: {command} from {source}" + (f" ({detail})" if detail else ""), t=t)
            case RunPaused(epoch=epoch, step=step):
                self.write(f"paused at epoch {epoch}, step {step}", t=t)
            case RunResumed(epoch=epoch, step=step, paused_for=paused_for):
                self.write(f"resumed at epoch {epoch}, step {step} after {format_duration(paused_for)}", t=t)
            case OutputPrinted(partial=True):
                pass  # a line still being redrawn (a progress bar): its final state comes as a whole line
            case OutputPrinted(text=text, stream=stream):
                level = "WARN" if stream == "stderr" else "INFO"
                for line in text.split("\n"):
                    self.write(f"[{stream}] {line}", level=level, t=t)
            case AlertRaised():
                self.write(
                    f"alert [{event.rule}] {alert_line(event.title, event.text)}",
                    level={"error": "ERROR", "info": "INFO"}.get(event.level, "WARN"),
                    t=t,
                )
            case StepSkipped():
                self.write(f"step {event.step} skipped (epoch {event.epoch}, batch {event.batch}): {event.rule}", t=t)
            case RolledBack():
                self.write(
                    f"rolled back from step {event.from_step} to step {event.to_step} ({event.checkpoint}); "
                    f"batches passed over: {event.skipped_batches}; lr x{event.lr_factor:g}",
                    level="WARN",
                    t=t,
                )
            case RunFinished():
                self.write(
                    f"run {event.status} ({event.reason}) at epoch {event.epoch}, step {event.step} "
                    f"after {format_duration(event.duration)}, exit code {event.exit_code}",
                    t=t,
                )
                if event.best:
                    self.write(_best_text(event.best), t=t)
                self._summary(event.summary, t)
            case RunFailed():
                self.write(
                    f"run failed at epoch {event.epoch}, step {event.step} after "
                    f"{format_duration(event.duration)}, exit code {event.exit_code}: {event.error}",
                    level="ERROR",
                    t=t,
                )
                if event.traceback:
                    self.write("traceback:\n" + event.traceback.rstrip("\n"), level="ERROR", t=t)
                self._summary(event.summary, t)

    def _summary(self, summary: dict[str, Any], t: float | None) -> None:
        table = format_summary_table(summary)
        if table:
            self.write("summary:\n" + table, t=t)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def _best_text(best: dict[str, Any]) -> str:
    text = f"best checkpoint: {best.get('file', '?')}"
    if best.get("monitor"):
        text += f" ({best['monitor']} {format_value(best.get('value'))})"
    return text
