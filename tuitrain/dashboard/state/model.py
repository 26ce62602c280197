"""`DashboardState`: the dashboard's view of a run, folded from the event stream.

Pure Python so it can be tested without a screen: `apply(events)` updates the state and returns
the kinds of change it made (changes.py: `Plot`, `Progress`, `Devices`, `Checkpoints`, `Log`,
`Result` ...), which `Feed` refreshes. The widgets only read it. Speed and ETA come from
`Throughput` (throughput.py). A file's logged metrics may come as `MetricsBlock`s (many
MetricsLogged at once, folded with numpy); device samples become series too (`device/cpu`, ...),
charted after the metrics. Must not import textual.

A resumed run is one run of several sessions (several RunStarted in one events.jsonl): the charts
hold every session's steps; the time shown (elapsed, the wall-time x axis) is training time, the
gaps between sessions closed up; speed and ETA are the current session's; an earlier session's end
is undone by the next RunStarted.
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from collections.abc import Callable, Iterable

import numpy as np

from tuitrain.core.events import (
    CheckpointDeleted,
    CheckpointFailed,
    CheckpointSaved,
    CheckpointStarted,
    ControlReceived,
    AlertRaised,
    DevicesSampled,
    EpochCompleted,
    RolledBack,
    EpochStarted,
    Event,
    HistogramLogged,
    MediaLogged,
    MetricsLogged,
    OutputPrinted,
    PhaseCompleted,
    PhaseStarted,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
    StepCompleted,
    StepStarted,
)
from tuitrain.core.text import alert_line
from tuitrain.sources.lookup import StepLookup
from tuitrain.dashboard.state.changes import (
    Alerts,
    Changes,
    Checkpoints,
    Devices,
    Log,
    NewEpisode,
    Plot,
    Progress,
    Result,
)
from tuitrain.dashboard.state.devices import DEVICE_PREFIX, device_values
from tuitrain.dashboard.state.foreign import READING, final_of, tool_of_loop, tool_of_source
from tuitrain.dashboard.state.media import MediaState, keep_of
from tuitrain.dashboard.state.series import Anchors, Series
from tuitrain.dashboard.state.throughput import Throughput
from tuitrain.sources.run_files import MetricsBlock, PastSessionsRead

# names of metrics where lower is better (the best valid value is their minimum); others: maximum
LOWER_IS_BETTER = frozenset("loss error err perplexity ppl mse mae rmse distance nll wait time bpc bpd cer wer".split())
X_AXES = ("step", "epoch", "time", "samples")  # what a chart's x axis can be


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _table(cfg: dict, key: str) -> dict:
    """A table of the run's config, {} when it is missing or not a table (a damaged events.jsonl)."""
    table = cfg.get(key)
    return table if isinstance(table, dict) else {}


class DashboardState:
    """Everything the panels show; fed in order by `apply`."""

    #: what the views ask in place of probing attributes: "run" (one run), "compare" (compare.py), "sweep"
    kind = "run"
    series_type: type[Series] = Series  #: what holds a series (the export's read-back keeps every value)

    def __init__(self, clock: Callable[[], float] = time.time, capacity: int = 1024, recent: int = 400) -> None:
        self.clock = clock
        self.capacity = capacity
        self.recent = recent
        # what the run is
        self.experiment = ""
        self.run_dir = ""
        self.files_dir: Path | None = None  # where its files are read from (watch), when not run_dir
        self._lookup: StepLookup | None = None
        self.epochs = 0
        self.max_steps = 0
        self.steps_per_epoch = 0
        self.batch_size = 0
        self.validate_every = 1
        self.monitor = ""
        self.resumed_from = ""
        self.started_at: float | None = None
        #: where the training clock starts: `started_at`, moved on by each gap between sessions
        self.origin: float | None = None
        self.sessions = 0  # RunStarted seen: a resumed run has several
        self.between_sessions = False  # a resumed run's past read, its next session not started yet
        self._active_at: float | None = None  # the newest session event's time (`_in_session`): a session's end
        self.start_step = 0
        # where it is
        self.activity = "starting"  # "running", "validating" or a user phase's name
        self.paused = False
        self.checkpointing = False
        self.stopping = False
        self.final = ""  # "completed", "interrupted" or "failed" once ended; "killed": its process went without its end
        self.phase = ""
        self.split = ""
        self.epoch = 0
        self.step = 0
        self.batch = 0
        self.batches = 0
        self.last_time: float | None = None
        # metrics
        self.series: dict[tuple[str, str, str], Series] = {}  # (split, scope, name)
        self.metric_names: list[str] = []
        self.latest: dict[str, float] = {}  # "train/loss" -> newest value
        self.epoch_steps: list[int] = []  # global step at each completed epoch, for boundary lines
        # the other x axes, as maps from the global step: seconds since the start, epochs, samples seen
        self.axes: dict[str, Anchors] = {"epoch": Anchors(), "time": Anchors(), "samples": Anchors()}
        self.mode = ""  # "min" or "max": the monitored metric's direction, from the config
        self._samples = 0  # items of training steps seen (StepCompleted) up to step `_samples_step`
        self._samples_step = 0
        #: the recent training steps: items/s, steps/s (throughput.py)
        self.throughput = Throughput(lambda: self.batch_size)
        self._step_events = False  # live runs send StepCompleted; files only MetricsLogged
        self._valid_durations: list[float] = []
        self._validated_epoch = 0  # the newest epoch whose validation started: later ones are still to come
        # other panels
        self.devices: dict[int, DevicesSampled] = {}
        self.env: dict = {}  # RunStarted.env: versions, devices, git commit
        self.loop = ""  # RunStarted.loop: "" tuitrain's own, "monitor", "lightning", "transformers"
        self.tool = ""  # the tool whose log the run was read from ("tensorboard"): foreign.py; "" tuitrain's own
        self.source_live: bool | None = None  # a foreign source's `live`: its writer still writing (None: not said)
        self.checkpoints: list[dict] = []  # newest first
        self.best_file = ""
        self.lines: deque[tuple[str, str, bool]] = deque(maxlen=5000)  # (stream, text, partial) not yet shown
        self.finished: RunFinished | None = None
        self.failed: RunFailed | None = None
        #: the health rules' alerts (AlertRaised), oldest first: the alerts list, the charts' marks, the header
        self.alerts: list = []
        #: the alerts' episodes, oldest first: each one's first alert by (rule, episode); an alert of episode 0
        #: is one of its own. The header counts them and the charts mark each once (SPEC "Health")
        self.episodes: dict[tuple, AlertRaised] = {}
        #: a script's alerts of level "info" (`mon.alert(..., level="info")`): shown, never alarming
        self.infos: list = []
        self.bell = True  # [alerts] bell: ring the terminal's bell for a live alert
        #: logged images and texts (the samples panel) and histograms (heatmaps in the chart grid): media.py
        self.media = MediaState()

    # --- reading ---------------------------------------------------------------------------

    @property
    def status(self) -> str:
        if self.final:
            return self.final
        if self.reading:
            return READING
        if self.stopping:
            return "stopping"
        if self.paused:
            return "paused"
        if self.checkpointing:
            return "checkpointing"
        return self.activity

    @property
    def reading(self) -> bool:
        """A foreign log whose writer has stopped, read and not yet to its end."""
        return bool(self.tool) and self.source_live is False and not self.final

    def seed(self, source) -> None:
        """Before its first event: a foreign source's run named by its ref, whether its writer still writes."""
        ref = getattr(source, "ref", None)
        self.tool = tool_of_source(source)
        if not self.tool or ref is None:
            return
        self.experiment = self.experiment or str(getattr(ref, "name", "") or "")
        self.run_dir = self.run_dir or str(getattr(ref, "path", "") or "")
        live = getattr(source, "live", None)
        self.source_live = live if isinstance(live, bool) else None

    @property
    def ended(self) -> bool:
        return bool(self.final)

    def alert_steps(self) -> list[int]:
        """Where the charts mark the alerts: each episode's first step."""
        return [a.step for a in self.episodes.values()]

    @property
    def total_steps(self) -> int:
        """Global steps the run will take, 0 when unknown."""
        total = self.epochs * self.steps_per_epoch if self.steps_per_epoch else 0
        if self.max_steps:
            total = min(total, self.max_steps) if total else self.max_steps
        return total

    def rates(self) -> tuple[float | None, float | None]:
        """(items/s, steps/s) over recent training steps; None during warm-up or when unknown
        (`Throughput.rates`)."""
        return self.throughput.rates()

    def eta(self) -> float | None:
        """Seconds left: remaining training steps at the recent rate plus the remaining validations."""
        if self.final:  # ended; killed (no end of its own): nothing to wait for, and no time it would have taken
            return 0.0 if self.finished is not None or self.failed is not None or self.final != "killed" else None
        _, steps_per_s = self.rates()
        total = self.total_steps
        if not steps_per_s or not total:
            return None
        left = max(total - self.step, 0) / steps_per_s
        if self._valid_durations and self.steps_per_epoch:
            last_epoch = math.ceil(total / self.steps_per_epoch)
            every = max(self.validate_every, 1)
            remaining = sum(1 for e in range(self._validated_epoch + 1, last_epoch + 1) if e % every == 0)
            left += remaining * (sum(self._valid_durations) / len(self._valid_durations))
        return left

    def elapsed(self) -> float | None:
        """Seconds of training: since the run started, less the gaps between its sessions."""
        if self.origin is None:
            return None
        # an end without a final event (killed, or work returned without one): its last event's time
        stopped = self.between_sessions or (self.final and self.finished is None and self.failed is None)
        end = (
            self.finished.time
            if self.finished
            else self.failed.time
            if self.failed
            else self._active_at
            if stopped and self._active_at is not None
            else self.clock()
        )
        return max(end - self.origin, 0.0)

    def value_at(self, split: str, name: str, step: float, run: str | None = None) -> tuple[float, float] | None:
        """(the newest logged step at or before `step`, its value) as the run's files hold it, exactly
        (lookup.py); None where they cannot tell. `run`: for a comparison's state."""
        where = self.files_dir or (Path(self.run_dir) if self.run_dir else None)
        if where is None:
            return None
        if self._lookup is None or self._lookup.run_dir != where:
            self._lookup = StepLookup(where)
        return self._lookup.value(split, name, step)

    def metric_series(self, name: str, split: str) -> Series | None:
        """The series to plot for one split: step values first for train, epoch values first for valid."""
        order = ("step", "epoch") if split == "train" else ("epoch", "step")
        for scope in order:
            s = self.series.get((split, scope, name))
            if s is not None and s.count:
                return s
        return None

    def lower_is_better(self, name: str) -> bool:
        if self.monitor and self.mode in ("min", "max") and self.monitor.partition("/")[2] == name:
            return self.mode == "min"
        words = name.lower().replace("-", "_").replace("/", "_").split("_")
        return any(w in LOWER_IS_BETTER or w.endswith("loss") for w in words)

    def best_valid(self, name: str) -> float | None:
        """The best valid value of a metric so far (its minimum or maximum, see `lower_is_better`)."""
        s = self.metric_series(name, "valid")
        if s is None:
            return None
        return s.min if self.lower_is_better(name) else s.max

    def x_axes(self) -> list[str]:
        """The x axes this run has data for, step first."""
        return ["step"] + [a for a in X_AXES[1:] if self.axes[a]]

    def monitored_value(self, metrics: dict) -> float | None:
        if not self.monitor or not isinstance(metrics, dict):
            return None
        v = metrics.get(self.monitor)
        if v is None:  # a writer that keys checkpoint metrics without the split
            v = metrics.get(self.monitor.partition("/")[2])
        return v if _is_number(v) else None

    def take_lines(self) -> list[tuple[str, str, bool]]:
        out = list(self.lines)
        self.lines.clear()
        return out

    # --- folding ---------------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> Changes:
        changed: Changes = set()
        for event in events:
            changed |= self._apply(event)
            t = getattr(event, "time", None)
            if isinstance(t, (int, float)):
                self.last_time = t
                if self._in_session(event):
                    self._active_at = t
        return changed

    def _in_session(self, event: Event) -> bool:
        """The event is a session's own up to its end: not what a next session prints while it builds,
        nor a device sample taken around a session's start or end."""
        if isinstance(event, (OutputPrinted, DevicesSampled)):
            return False
        return (self.finished is None and self.failed is None) or event is self.finished or event is self.failed

    def _log(self, stream: str, text: str, partial: bool = False) -> None:
        if self.lines and self.lines[-1][2] and self.lines[-1][0] == stream:
            self.lines.pop()  # a line being redrawn (or then ended): only its newest state waits to be shown
        self.lines.append((stream, text, partial))

    def _apply(self, event: Event) -> Changes:
        match event:
            case StepCompleted():
                self._step_events = True
                self.batch = event.batch + 1
                if event.phase == "train" or (self.split == "train" and event.phase == self.phase):
                    self.step = max(self.step, event.step)
                    self._tick(event.time, event.step, event.items)
                return {Progress}
            case StepStarted():
                self.epoch = event.epoch
                return set()
            case MetricsLogged():
                return self._metrics(event)
            case MetricsBlock():
                return self._block(event)
            case PastSessionsRead():  # this session is being built: its clock starts with its RunStarted
                self.final, self.finished, self.failed, self.between_sessions = "", None, None, True
                self.activity, self.stopping, self.paused, self.checkpointing = "starting", False, False, False
                return {Progress}
            case RunStarted():
                self.experiment, self.run_dir = event.experiment, event.run_dir
                self.env = dict(event.env) if isinstance(event.env, dict) else {}
                self.epochs, self.max_steps = event.epochs, event.max_steps
                self.steps_per_epoch, self.batch_size = event.steps_per_epoch, event.batch_size
                self.resumed_from = event.resumed_from
                self.loop = event.loop
                self.tool = tool_of_loop(event.loop) or self.tool
                self.epoch, self.step, self.start_step = event.start_epoch, event.start_step, event.start_step
                self._new_session(event.time)
                cfg = event.config if isinstance(event.config, dict) else {}
                checkpoint = _table(cfg, "checkpoint")
                self.monitor = str(checkpoint.get("monitor", "") or "")
                self.mode = str(checkpoint.get("mode", "") or "")
                self.bell = _table(cfg, "alerts").get("bell", True) is not False
                self.media.keep = keep_of(cfg)
                if event.start_step * (event.batch_size or 0) > self._samples:  # a resumed run's items before it
                    self._samples, self._samples_step = event.start_step * event.batch_size, event.start_step
                every = _table(cfg, "train").get("validate_every", 1)
                self.validate_every = every if isinstance(every, int) and every > 0 else 1
                self.final, self.stopping, self.paused = "", False, False
                self.activity = "running"
                if event.resumed_from:
                    self._log("tuitrain", f"resumed from {event.resumed_from} at step {event.start_step}")
                return {Progress, Log, Checkpoints}
            case EpochStarted():
                self.epoch, self.epochs = event.epoch, event.epochs or self.epochs
                return {Progress}
            case PhaseStarted():
                self.phase, self.split, self.epoch = event.phase, event.split, event.epoch
                self.batch, self.batches = 0, event.batches
                self.activity = (
                    "validating" if event.split == "valid" else "running" if event.phase == "train" else event.phase
                )
                if event.split == "train":
                    self.throughput.gap()  # the gap since the last training step was not training
                elif event.split == "valid":
                    self._validated_epoch = max(self._validated_epoch, event.epoch)
                return {Progress}
            case PhaseCompleted():
                if event.split == self.split and event.phase == self.phase:
                    self.batch = max(self.batch, self.batches)  # done: a run's files log no valid batches
                if self.activity != "starting":
                    self.activity = "running"  # between phases the run is still running
                if event.split == "valid" and event.duration > 0:
                    self._valid_durations = (self._valid_durations + [event.duration])[-5:]
                return {Progress}
            case EpochCompleted():
                if not self.epoch_steps or self.epoch_steps[-1] != event.step:
                    self.epoch_steps.append(event.step)
                self.axes["epoch"].add(event.step, event.epoch)
                self.epoch = event.epoch
                self.latest.update({k: v for k, v in event.metrics.items() if _is_number(v)})
                return {Progress, Plot}
            case CheckpointStarted():
                self.checkpointing = True
                return {Progress}
            case CheckpointSaved():
                self.checkpointing = False
                self.checkpoints = [c for c in self.checkpoints if c["file"] != event.file]
                self.checkpoints.insert(
                    0,
                    {
                        "file": event.file,
                        "epoch": event.epoch,
                        "step": event.step,
                        "bytes": event.bytes,
                        "value": self.monitored_value(event.metrics),
                        "time": event.time,
                        "reason": event.reason,
                        "requested": event.requested,
                    },
                )
                if event.best:
                    self.best_file = event.file
                return {Progress, Checkpoints}
            case CheckpointDeleted():
                self.checkpoints = [c for c in self.checkpoints if c["file"] != event.file]
                return {Checkpoints}
            case CheckpointFailed():
                self.checkpointing = False
                self._log("stderr", f"[tuitrain] checkpoint at step {event.step} failed: {event.error}")
                return {Progress, Log}
            case ControlReceived():
                if event.command == "stop":
                    self.stopping = True
                detail = f": {event.detail}" if event.detail else ""
                self._log("tuitrain", f"[tuitrain] {event.command} requested ({event.source}{detail})")
                return {Progress, Log}
            case RunPaused():
                self.paused = True
                return {Progress}
            case RunResumed():
                self.paused = False
                self.throughput.gap()  # paused time is not training time
                return {Progress}
            case OutputPrinted():
                self._log(event.stream, event.text, event.partial)
                return {Log}
            case MediaLogged() | HistogramLogged():
                return self.media.add(event)
            case AlertRaised(level="info"):  # said in the output panel and the header; no mark, no bell
                self.infos.append(event)
                self._log("tuitrain", f"[info] step {event.step}: {alert_line(event.title, event.text)}")
                return {Log, Progress}
            case AlertRaised():
                self.alerts.append(event)
                key = (event.rule, event.episode) if event.episode else (event.rule, 0, len(self.alerts))
                new = key not in self.episodes
                if new:
                    self.episodes[key] = event
                held = ""
                if event.held > 0 and f"{event.held} more" not in event.text:  # the rules' own text says it
                    held = f" (+{event.held} more spike{'s' if event.held != 1 else ''} since the previous alert)"
                self._log("stderr", f"[alert] step {event.step}: {event.title} ({event.action}): {event.text}{held}")
                # "episode": a new one (the bell rings once an episode, not for each of its skips)
                return {Log, Alerts, Progress} | ({NewEpisode} if new else set())
            case RolledBack():
                self._log(
                    "tuitrain",
                    f"[tuitrain] rolled back from step {event.from_step} to step {event.to_step}; "
                    f"{len(event.skipped_batches)} batch(es) passed over",
                )
                return {Log, Progress}
            case DevicesSampled():
                self.devices[event.rank] = event
                return {Devices} | self._device_history(event)
            case RunFinished():
                self.finished, self.final = event, final_of(self.tool, event.status)
                self.epoch, self.step = event.epoch, event.step
                self.paused = self.checkpointing = False
                if event.best.get("file"):
                    self.best_file = event.best["file"]
                return {Progress, Result, Checkpoints, Plot}
            case RunFailed():
                self.failed, self.final = event, "failed"
                self.epoch, self.step = event.epoch, event.step
                self.paused = self.checkpointing = False
                return {Progress, Result}
        return set()

    def _new_session(self, t: float) -> None:
        """A RunStarted: the run's first, or a resumed run's next session. The gap since the last
        session's last event is not training time; an earlier session's end no longer stands; speed
        and ETA start over (this session's machine, its warm-up)."""
        self.sessions += 1
        self.between_sessions = False
        if self.origin is None:
            self.started_at = self.origin = t
        else:
            self.origin += max(t - (self._active_at if self._active_at is not None else t), 0.0)
        self.finished = self.failed = None
        self.throughput.restart()

    def _metrics(self, event: MetricsLogged) -> Changes:
        self.epoch = event.epoch
        if event.scope == "step" or event.split == "train":
            self.step = max(self.step, event.step)
        for name, value in event.metrics.items():
            if not _is_number(value):
                continue
            key = (event.split, event.scope, name)
            series = self.series.get(key) or self._new_series(key)
            series.append(event.step, value)
            self.latest[f"{event.split}/{name}"] = value
        if event.split == self.split and event.batches:
            self.batch, self.batches = event.batch, event.batches
        if event.split == "train" and event.scope == "step":
            self._anchor(event)
        if event.split == "train" and event.scope == "step" and not self._step_events:
            # from a file there are no step events: logged steps are the ticks
            prev = self.throughput.last_step()
            items = (event.step - prev) * self.batch_size if prev is not None else 0
            self._tick(event.time, event.step, items, steps=event.step - prev if prev is not None else 1)
        return {Plot, Progress}

    def _new_series(self, key: tuple[str, str, str]) -> Series:
        series = self.series[key] = self.series_type(self.capacity, self.recent)
        name = key[2]
        if name not in self.metric_names:
            if name.startswith(DEVICE_PREFIX):
                self.metric_names.append(name)  # device charts after the metrics: training comes first
            else:  # loss first: it is what people look at; then the others as they came, before the devices
                devices = next(
                    (i for i, n in enumerate(self.metric_names) if n.startswith(DEVICE_PREFIX)), len(self.metric_names)
                )
                self.metric_names.insert(0 if name == "loss" else devices, name)
        return series

    def _block(self, block: MetricsBlock) -> Changes:
        """Many MetricsLogged of a file at once: what `_metrics` of each would leave, with numpy."""
        self.epoch = block.epoch
        changed: Changes = {Plot, Progress}
        if block.samples:  # device samples that came between the rows: each at the newest step before it
            before = self.step
            top = np.maximum.accumulate(block.train_steps[0]) if block.train_steps is not None else None
            for row, sample in block.samples:
                self.step = max(before, int(top[row - 1])) if row and top is not None else before
                changed |= self._apply(sample)
            self.step = before
        if block.max_step is not None:
            self.step = max(self.step, block.max_step)
        for key, (xs, ys) in block.series.items():
            (self.series.get(key) or self._new_series(key)).extend(xs, ys)
        self.latest.update(block.latest)
        if self.split in block.progress:
            self.batch, self.batches = block.progress[self.split]
        if block.train_steps is not None:
            steps, times, epochs, batch, batches = block.train_steps
            if self.origin is not None:
                self.axes["time"].extend(steps, times - self.origin)
            known = (batches > 0) & (epochs != 0)
            if known.any():
                part = np.minimum(batch[known], batches[known]) / batches[known]
                self.axes["epoch"].extend(steps[known], epochs[known] - 1 + part)
            if self._samples or self.batch_size:
                self.axes["samples"].extend(steps, self._samples_at(steps))
            if not self._step_events:
                self.throughput.wait(steps, times)
        return changed

    def _device_history(self, event: DevicesSampled) -> Changes:
        """A device sample as points at the newest training step (devices.py)."""
        values = device_values(event)
        for name, value in values:
            key = ("train", "step", name)
            (self.series.get(key) or self._new_series(key)).append(self.step, value)
            self.latest[f"train/{name}"] = value
        return {Plot} if values else set()

    def _anchor(self, event: MetricsLogged) -> None:
        """The other x axes at a logged training step."""
        if self.origin is not None:
            self.axes["time"].add(event.step, event.time - self.origin)
        if event.batches and event.epoch:
            self.axes["epoch"].add(event.step, event.epoch - 1 + min(event.batch, event.batches) / event.batches)
        if self._samples or self.batch_size:
            self.axes["samples"].add(event.step, float(self._samples_at(event.step)))

    def _samples_at(self, step: float | np.ndarray) -> np.ndarray:
        """Items seen by `step` (a number or an array of steps): those counted up to `_samples_step` (step
        events, a resumed run's start), on by the batch size a step. The sampled step events a live run's
        screen gets come now and then, not at each logged step: the count alone lags behind it."""
        return np.maximum(self._samples + (step - self._samples_step) * self.batch_size, 0)

    def _tick(self, t: float, step: int, items: int, steps: int = 1) -> None:
        self.throughput.tick(t, step, items, steps)
        if self._step_events and step > self._samples_step:  # (a step logged before its step event came: counted)
            self._samples, self._samples_step = self._samples + items, step
