"""`HeadlessConsole`: the plain progress output of `tuitrain run --headless` (CI logs, nohup, tee).

Plain lines only: no ANSI escapes, no carriage returns, at most one progress line per `interval`
seconds, one summary line per epoch, a line per checkpoint, control command and pause, what the
user's code printed (verbatim, but with terminal escapes removed and `\\r` overwrites collapsed to
the text a terminal would end up showing), and the summary table at the end. A logged text sample
is a line and its first lines (`SAMPLE_LINES`, each cut to `SAMPLE_WIDTH`), an image one line with
its size and file; histograms, many at each step, only a line naming those seen for the first time.
Must not import torch or textual.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO
from collections.abc import Callable

from tuitrain.core.events import (
    CheckpointFailed,
    CheckpointSaved,
    ControlReceived,
    EpochCompleted,
    EpochStarted,
    Event,
    HistogramLogged,
    JobRequeued,
    AlertRaised,
    MediaLogged,
    MetricsLogged,
    OutputPrinted,
    PhaseStarted,
    RolledBack,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
    StepCompleted,
    StepStarted,
)
from tuitrain.core.text import alert_line, safe_text
from tuitrain.sinks.summary import format_duration, format_metric, format_summary_table, format_value

SEP = " · "
SAMPLE_LINES = 8  #: a text sample's lines shown
SAMPLE_WIDTH = 120  #: characters of each, the rest cut
HISTOGRAM_NAMES = 8  #: names listed in a histograms line, the rest counted


def plain(text: str) -> str:
    """Text as a log file should hold it: escapes and controls removed, each line what a terminal
    would show (tuitrain.core.text.safe_text)."""
    return safe_text(text)


def format_rate(rate: float) -> str:
    if rate >= 100:
        return f"{rate:.0f} it/s"
    if rate >= 10:
        return f"{rate:.1f} it/s"
    return f"{rate:.2f} it/s"


def format_throughput(value: object, unit: str = "samples") -> str:
    """Items per second with their unit: 485.2 samples/s (one decimal at any size), not 485.1687."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or value in (float("inf"), float("-inf"))
    ):
        return format_value(value)
    return f"{value:.1f} {unit}/s" if abs(value) >= 1 or value == 0 else f"{value:.3g} {unit}/s"


def reason_text(reason: str, epochs: int = 0, max_steps: int = 0) -> str:
    return {
        "epochs": f"all {epochs} epochs done" if epochs else "all epochs done",
        "max_steps": f"max_steps {max_steps} reached" if max_steps else "max_steps reached",
        "early_stopping": "early stopping",
        "max_time": "max_time spent",
        "stopped": "stopped",
        "preempted": "preempted (time is up)",
        "pruned": "pruned by the sweep",
    }.get(reason, reason or "done")


class HeadlessConsole:
    """Writes a run's progress as plain lines to `stream` (the user's stderr output to `err`)."""

    step_events = True  # StepStarted/StepCompleted drive the progress line between logged steps
    batch_events = True  # it may get the frequent events in batches (EventBus)

    def __init__(
        self,
        stream: TextIO | None = None,
        err: TextIO | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # resolved now rather than at import, so a redirected sys.stdout is honoured
        self.stream = stream if stream is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        self._last_progress: float | None = None
        self._progressed = False  # a step finished since the last progress line
        self.run_dir = self.abs_run_dir = ""
        self.last_checkpoint = ""  # the newest checkpoint saved, as its event named it (run dir relative)
        self.epochs = self.max_steps = self.steps_per_epoch = 0
        self.epoch = 0
        self.epoch_start_step = 0
        self.step = 0
        self.phase, self.split = "", ""
        self.batch = self.batches = 0
        self.metrics: dict[str, Any] = {}
        self._rate_origin: tuple[float, int] | None = None  # (time, step or batch) at phase start
        self.rate: float | None = None  # train steps/s, or batches/s in another phase
        self._train_rate: float | None = None  # kept across epochs for the ETA
        self._histograms: set[str] = set()  # the names seen
        self._new_histograms: list[str] = []  # seen for the first time, said at the next other event
        self._new_histograms_step = 0
        self.throughput_unit = "samples"  # or "tokens" (metrics.throughput_unit)

    def metric_text(self, name: str, value: object) -> str:
        if name.rpartition("/")[2] == "throughput":
            return format_throughput(value, self.throughput_unit)
        return format_metric(name, value)

    # --- output ---------------------------------------------------------------------------

    def _emit(self, text: str, to: TextIO | None = None) -> None:
        stream = to or self.stream
        try:
            stream.write(safe_text(text) + "\n")  # names and prints of the user's code: never obeyed
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) must not stop training
            pass

    # --- events ---------------------------------------------------------------------------

    def __call__(self, event: Event, state: object = None) -> None:
        if self._new_histograms and not isinstance(event, HistogramLogged):
            self._say_histograms()
        match event:
            case RunStarted():
                self.run_dir = event.run_dir
                self.abs_run_dir = os.path.abspath(event.run_dir) if event.run_dir else ""  # cwd of now
                self.epochs, self.max_steps = event.epochs, event.max_steps
                self.steps_per_epoch = event.steps_per_epoch
                self.step = event.start_step
                metrics = (event.config or {}).get("metrics")
                if isinstance(metrics, dict) and metrics.get("throughput_unit") in ("samples", "tokens"):
                    self.throughput_unit = metrics["throughput_unit"]
                text = f"run {event.run_dir}{SEP}experiment {event.experiment}"
                if event.epochs:  # a loop of one's own (Monitor) may have no epochs: none said
                    text += f"{SEP}{event.epochs} epoch{'s' if event.epochs != 1 else ''}"
                    if event.steps_per_epoch:
                        text += f" × {event.steps_per_epoch} steps"
                if event.max_steps:
                    text += f"{SEP}max_steps {event.max_steps}"
                self._emit(text)
                if event.resumed_from:
                    self._emit(
                        f"resumed from {event.resumed_from} at epoch {event.start_epoch}, step {event.start_step}"
                    )
            case EpochStarted(epoch=epoch, epochs=epochs, step=step):
                self.epoch, self.epochs, self.epoch_start_step, self.step = epoch, epochs or self.epochs, step, step
            case PhaseStarted():
                self.phase, self.split, self.epoch = event.phase, event.split, event.epoch
                self.batch, self.batches, self.metrics, self._progressed = 0, event.batches, {}, False
                self.step = event.step
                self.rate = self._train_rate if event.phase == "train" else None
                origin = event.step if event.phase == "train" else 0
                self._rate_origin = (event.time, origin)
            case StepStarted():
                # checked here rather than at StepCompleted, which comes before that step's metrics
                self._maybe_progress()
            case StepCompleted():
                self._advance(event.step, event.batch + 1, event.time)
            case MetricsLogged(scope="step"):
                # a loop of one's own (Monitor, Lightning) says its epoch here alone, without EpochStarted
                self.epoch = event.epoch or self.epoch
                if event.split == self.split:
                    self.metrics = dict(event.metrics)
                elif not self.split:  # no phases: a split other than train is named, as "valid/loss"
                    named = event.split not in ("", "train")
                    self.metrics = {(f"{event.split}/{k}" if named else k): v for k, v in event.metrics.items()}
                self.batches = event.batches or self.batches
                self._advance(event.step, event.batch, event.time)
                self._maybe_progress()
            case EpochCompleted():
                parts = [f"epoch {event.epoch}/{event.epochs} done in {format_duration(event.duration)}"]
                parts += [f"{k} {self.metric_text(k, v)}" for k, v in event.metrics.items()]
                self._emit(SEP.join(parts))
            case CheckpointSaved():
                self.last_checkpoint = event.file
                best = f"{SEP}best" if event.best else ""
                self._emit(f"checkpoint saved: {event.file} (epoch {event.epoch}, step {event.step}){best}")
            case CheckpointFailed():
                self._emit(
                    f"warning: checkpoint failed at epoch {event.epoch}, step {event.step}: {event.error}", self.err
                )
            case ControlReceived(command=command, source=source, detail=detail):
                self._emit(f"{command} requested ({source}{': ' + detail if detail else ''})")
            case RunPaused(epoch=epoch, step=step):
                self._emit(f"paused at epoch {epoch}, step {step}")
            case RunResumed(paused_for=paused_for):
                self._emit(f"resumed after {format_duration(paused_for)}")
            case OutputPrinted(partial=True):
                pass  # a line still being redrawn: its whole line comes when it ends
            case OutputPrinted(text=text, stream=stream):
                self._emit(text, self.err if stream == "stderr" else self.stream)
            case AlertRaised(level="info"):  # a script's note: a line of its own, not an alarm
                self._emit(f"info [{safe_text(event.rule, lines=False)}] {alert_line(event.title, event.text)}")
            case AlertRaised():  # one line of its own, on stderr: seen in a CI log, a `tee`, a mail from cron
                self._emit(
                    f"ALERT {safe_text(event.level, lines=False)} [{safe_text(event.rule, lines=False)}] "
                    f"{alert_line(event.title, event.text)}",
                    self.err,
                )
            case RolledBack():
                self._emit(
                    f"rolled back from step {event.from_step} to step {event.to_step} ({event.checkpoint}); "
                    f"{len(event.skipped_batches)} batch(es) passed over, lr x{event.lr_factor:g} "
                    f"(rollback {event.rollbacks})"
                )
            case MediaLogged():
                self._media(event)
            case HistogramLogged(key=key):
                if key not in self._histograms:
                    self._histograms.add(key)
                    if not self._new_histograms:
                        self._new_histograms_step = event.step
                    self._new_histograms.append(key)
            case RunFinished():
                self._finished(event)
            case JobRequeued(job_id=job, requeued=True):
                self._emit(f"Slurm job {safe_text(job)} requeued: the same command with --resume auto continues")
            case JobRequeued(job_id=job, detail=detail):
                self._emit(f"warning: Slurm job {safe_text(job)} not requeued: {safe_text(detail)}", self.err)
            case RunFailed():
                table = format_summary_table(event.summary)
                if table:
                    self._emit(table)
                if event.cause:  # the run directory or memory failed, not the user's code: one plain line
                    where = (
                        f"; traceback in {self.run_dir}/experiment.log"
                        if self.run_dir and event.cause != "write_failed"
                        else ""
                    )
                    self._emit(
                        f"error: {event.error}; stopped at epoch {event.epoch}, step {event.step}; last "
                        f"complete checkpoint: {event.checkpoint or 'none'}{where}",
                        self.err,
                    )
                    return
                where = f"; traceback in {self.run_dir}/experiment.log" if self.run_dir else ""
                self._emit(f"error: {event.error} (epoch {event.epoch}, step {event.step}){where}", self.err)

    def _media(self, event: MediaLogged) -> None:
        name = safe_text(event.key, lines=False)
        where = f" → {safe_text(event.path, lines=False)}" if event.path else ""
        if event.kind == "image":
            self._emit(f"{name}: image {event.width}x{event.height} at step {event.step}{where}")
            return
        lines = safe_text(event.text).rstrip().split("\n")
        if lines == [""]:
            self._emit(f"{name}: text at step {event.step}{where} (empty)")
            return
        self._emit(f"{name}: text at step {event.step}{where}")
        for line in lines[:SAMPLE_LINES]:
            line = line.rstrip()
            self._emit(f"  | {line[: SAMPLE_WIDTH - 1] + '…' if len(line) > SAMPLE_WIDTH else line}")
        if len(lines) > SAMPLE_LINES:
            more = len(lines) - SAMPLE_LINES
            self._emit(f"  | … {more} more line{'s' if more > 1 else ''}")

    def _say_histograms(self) -> None:
        names, self._new_histograms = self._new_histograms, []
        shown = ", ".join(safe_text(n, lines=False) for n in names[:HISTOGRAM_NAMES])
        if len(names) > HISTOGRAM_NAMES:
            shown += f" and {len(names) - HISTOGRAM_NAMES} more"
        self._emit(f"histograms from step {self._new_histograms_step}: {shown}")

    def _advance(self, step: int, batch: int, t: float) -> None:
        self.step, self.batch, self._progressed = step, max(batch, 0), True
        if self._rate_origin is None:
            return
        t0, origin = self._rate_origin
        done = (step if self.phase == "train" else self.batch) - origin
        if t > t0 and done > 0:
            self.rate = done / (t - t0)
            if self.phase == "train":
                self._train_rate = self.rate

    def _maybe_progress(self) -> None:
        if not self._progressed:
            return
        now = self.clock()
        if self._last_progress is not None and now - self._last_progress < self.interval:
            return
        self._last_progress, self._progressed = now, False
        self._emit(self.progress_line())

    def total_steps(self) -> int:
        """The global step training ends at, 0 when unknown."""
        by_epochs = self.epochs * self.steps_per_epoch
        if self.max_steps and (not by_epochs or self.max_steps < by_epochs):
            return self.max_steps
        return by_epochs

    def eta(self) -> float | None:
        """Seconds of training left at the observed step rate; validation time left out."""
        total, rate = self.total_steps(), self._train_rate
        if not total or not rate:
            return None
        return max(total - self.step, 0) / rate

    def progress_line(self) -> str:
        parts = []  # no epoch part before one is known (epoch 0), or in a loop without epochs
        if self.epoch >= 1:
            parts.append(f"epoch {self.epoch}/{self.epochs}" if self.epochs else f"epoch {self.epoch}")
        if self.phase == "train" or not self.phase:
            total = self.total_steps()
            if self.max_steps and total == self.max_steps:
                parts.append(f"step {self.step}/{total}")
            elif self.steps_per_epoch:
                parts.append(f"step {self.step - self.epoch_start_step}/{self.steps_per_epoch}")
            else:
                parts.append(f"step {self.step - self.epoch_start_step}")
        else:
            parts.append(f"{self.phase} {self.batch}/{self.batches}" if self.batches else f"{self.phase} {self.batch}")
        parts += [f"{k} {self.metric_text(k, v)}" for k, v in self.metrics.items()]
        if self.rate:
            parts.append(format_rate(self.rate))
        if self.phase == "train" or not self.phase:
            eta = self.eta()
            if eta is not None:
                parts.append(f"ETA {format_duration(eta)}")
        return SEP.join(parts)

    def _finished(self, event: RunFinished) -> None:
        why = reason_text(event.reason, self.epochs, self.max_steps)
        # a loop of one's own ends "completed" (Monitor): "training completed", not "completed: completed"
        self._emit(f"training {event.status}" + (f": {why}" if why != event.status else ""))
        table = format_summary_table(event.summary)
        if table:
            self._emit(table)
        self._emit(
            f"status {event.status}{SEP}exit code {event.exit_code}{SEP}epoch {event.epoch}{SEP}"
            f"step {event.step}{SEP}duration {format_duration(event.duration)}"
        )
        if event.best:
            best = f"best checkpoint: {self.where(event.best.get('file', '?'))}"
            if event.best.get("monitor"):
                best += f" ({event.best['monitor']} {format_value(event.best.get('value'))})"
            self._emit(best)
        if self.last_checkpoint and self.last_checkpoint != event.best.get("file"):
            self._emit(f"last checkpoint: {self.where(self.last_checkpoint)}")

    def where(self, file: str) -> str:
        """A checkpoint's path as a user can use it from any folder: absolute (events name it relative to
        the run directory)."""
        if not file or file == "?" or os.path.isabs(file) or not self.abs_run_dir:
            return file
        return os.path.join(self.abs_run_dir, file)

    def close(self) -> None:
        if self._new_histograms:
            self._say_histograms()
        for stream in (self.stream, self.err):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
