"""The event stream: every fact that leaves the training core is one of these frozen dataclasses.

Events carry plain numbers, strings, lists and dicts only (never tensors), so that any sink can
write them and `tuitrain watch` can read them back from `events.jsonl`. Must not import torch or
textual.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar


def _now() -> float:
    return time.time()


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event; `name` is the class name written as `event` in events.jsonl."""

    #: per-step events are not written to events.jsonl (too many); everything else is
    persistent: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return type(self).__name__

    def to_dict(self) -> dict[str, Any]:
        d = {"event": type(self).__name__}
        for name in _field_names(type(self)):
            d[name] = getattr(self, name)
        return d

    def to_json(self) -> str:
        return dumps(self.to_dict())


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    # dataclasses.fields() rebuilds its tuple on every call; events are serialised often
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


@dataclass(frozen=True, slots=True)
class RunStarted(Event):
    run_dir: str
    experiment: str
    epochs: int
    max_steps: int
    steps_per_epoch: int  # optimizer steps per training epoch, 0 when unknown
    batch_size: int
    start_epoch: int = 1
    start_step: int = 0
    resumed_from: str = ""
    pid: int = 0
    env: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=_now)
    #: the loop that runs, for what the dashboard promises a stop does: "" tuitrain's own (a Learner,
    #: `tuitrain run`), "monitor" a loop of the user's own, "lightning" or "transformers" (the integrations)
    loop: str = ""


@dataclass(frozen=True, slots=True)
class EpochStarted(Event):
    epoch: int
    epochs: int
    step: int
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class PhaseStarted(Event):
    phase: str  # "train", "valid" or a user phase's name
    split: str  # the metric split it reports under: "train" or "valid"
    epoch: int
    step: int
    batches: int  # batches this phase will run, 0 when unknown
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class StepStarted(Event):
    persistent: ClassVar[bool] = False
    phase: str
    epoch: int
    step: int  # global optimizer step about to run (training) or the current one (validation)
    batch: int  # index of the batch within the phase, from 0
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class StepCompleted(Event):
    persistent: ClassVar[bool] = False
    phase: str
    epoch: int
    step: int
    batch: int
    items: int
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class StepPoint(Event):
    """A point inside a step that a phase of one's own announces with `learner.fire(...)`:
    "loss" (loss computed), "backward_started", "backward_completed", "optimizer_stepped" (with the
    optimizer's name in `detail`), or any name of the user's. Per-step: not written to events.jsonl."""

    persistent: ClassVar[bool] = False
    point: str
    phase: str
    epoch: int
    step: int  # the step under way
    detail: str = ""
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class MetricsLogged(Event):
    split: str  # "train" or "valid"
    epoch: int
    step: int  # global optimizer step, from 1
    metrics: dict[str, Any]  # {name: float}
    scope: str = "step"  # "step": a value at a step; "epoch": the phase's aggregate
    batch: int = 0  # batches done in this phase when logged
    batches: int = 0  # batches in this phase, 0 when unknown
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class PhaseCompleted(Event):
    phase: str
    split: str
    epoch: int
    step: int
    metrics: dict[str, Any]
    duration: float
    items: int
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class EpochCompleted(Event):
    epoch: int
    epochs: int
    step: int
    metrics: dict[str, Any]  # {"train/loss": ..., "valid/accuracy": ...}
    duration: float
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class CheckpointStarted(Event):
    epoch: int
    step: int
    reason: str  # "epoch", "step", "request", "stop", "end"
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class CheckpointSaved(Event):
    file: str  # path relative to the run directory
    epoch: int
    step: int
    metrics: dict[str, Any]
    bytes: int
    best: bool
    reason: str
    stall: float  # seconds the loop waited (copying state to CPU)
    write: float  # seconds the background write took
    time: float = field(default_factory=_now)
    #: who asked for it ("dashboard", "command", "stop", ...): kept apart from the run's own by
    #: `keep_requested`, never deleted by keep_last/keep_best; "": one of the run's own
    requested: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointDeleted(Event):
    file: str
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class CheckpointFailed(Event):
    epoch: int
    step: int
    error: str
    reason: str
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class ControlReceived(Event):
    command: str  # "stop", "pause", "resume", "checkpoint"
    source: str  # "signal", "dashboard", "file", "api", "early_stopping"
    detail: str = ""
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class RunPaused(Event):
    epoch: int
    step: int
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class RunResumed(Event):
    epoch: int
    step: int
    paused_for: float
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class OutputPrinted(Event):
    text: str  # one or more whole lines, without the final newline
    stream: str = "stdout"  # "stdout", "stderr", "log", "tuitrain"
    time: float = field(default_factory=_now)
    #: a line not ended yet, shown as it stands (a progress bar redrawn with `\r`, a print with
    #: end="" flushed): the next OutputPrinted of its stream replaces it on screen
    partial: bool = False


@dataclass(frozen=True, slots=True)
class DevicesSampled(Event):
    cpu: float  # percent, whole machine
    cpu_per_core: list[float]
    memory: float  # percent used, whole machine
    memory_used: int  # bytes
    memory_total: int
    rss: int  # bytes, this process (and its data-loader workers)
    # [{"index", "name", "util", "mem_used", "mem_total", "temp", "power", "torch_allocated"}]
    gpus: list[Any] = field(default_factory=list)
    rank: int = 0
    process_cpu: float | None = None  # percent of one core, this process (all its threads)
    steps_per_s: float | None = None  # this process's optimizer steps per second since the last sample
    items_per_s: float | None = None  # and its samples per second (steps x batch x accumulation)
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class RunFinished(Event):
    status: str  # "completed" or "interrupted"
    exit_code: int
    epoch: int
    step: int
    reason: str  # why it ended: "epochs", "max_steps", "early_stopping", "stopped", "preempted", "max_time", "pruned"
    duration: float
    summary: dict[str, dict[str, Any]]  # {"train/loss": {"min", "min_epoch", "max", "max_epoch", "last"}, ...}
    best: dict[str, Any]  # {"file", "monitor", "value"} or {}
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class RunFailed(Event):
    error: str  # "ValueError: bad shape"
    traceback: str
    epoch: int
    step: int
    exit_code: int = 1
    duration: float = 0.0
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: what failed: "" the user's code, "write_failed" the run directory (a full disk...), "out_of_memory",
    #: "config_error" a config found wrong only while a rank built the user's parts (exit code 2)
    cause: str = ""
    #: the last complete checkpoint's path ("" when none was written)
    checkpoint: str = ""
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class JobRequeued(Event):
    """After a preemption under Slurm: `scontrol requeue` asked for (once, by rank 0) and its answer."""

    job_id: str
    requeued: bool  # scontrol said yes
    detail: str = ""  # what went wrong, when it did
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class AlertRaised(Event):
    """A health rule found trouble (see tuitrain.core.health), or a script's `mon.alert(...)`."""

    rule: str  # "nonfinite", "loss_spike", "grad_spike", "stall", "data_wait", "user"
    level: str  # "warning" or "error"; "info" (a script's own: shown, not alarming)
    title: str  # one short line
    text: str  # what was seen and what was done
    step: int
    value: float | None = None  # the value judged (the loss, the grad norm, seconds stalled, a share)
    action: str = "alert"  # what the run did: "alert", "skip", "rollback", "stop", "abort", "fail"
    epoch: int = 0
    time: float = field(default_factory=_now)
    #: the rule's episode this alert belongs to (1, 2, ...; 0: not counted by episode). Consecutive spikes
    #: are one episode: a rule that acts (skip) raises an alert per spike, all with the episode's number;
    #: the header counts episodes and the charts mark each once
    episode: int = 0
    #: spikes of this rule not alerted since its previous alert (an alert-only rule speaks at most once a minute)
    held: int = 0


@dataclass(frozen=True, slots=True)
class StepSkipped(Event):
    """A training step's update not applied (weights, optimizer, scheduler, scaler untouched)."""

    step: int  # the step the batch would have made (the step counter does not advance)
    epoch: int
    batch: int  # the batch's index in its epoch
    rule: str
    value: float | None = None
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class RolledBack(Event):
    """Training went back to an earlier checkpoint, passing over the batches that caused trouble."""

    from_step: int  # the step where the trouble was found
    to_step: int  # the checkpoint's step, where training goes on
    checkpoint: str
    skipped_batches: list[list[int]]  # [[epoch, batch], ...] passed over from now on
    lr_factor: float
    rule: str = ""
    rollbacks: int = 1  # how many so far in this run
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class MediaLogged(Event):
    """An image or a text logged (`log_image`, `log_text`, `[log] samples`), written to
    RUN_DIR/`path` (`media/<name>/<step>.png` or `.txt`) before this is said. A text's words are in
    `text` too, its first `media.EVENT_TEXT_CHARS` characters, so a reader needs no file for them.
    Older files of a name are thinned (`log.media_keep`): a reader finds some of them gone."""

    key: str  # the name it was logged under ("samples", "weights/fc1")
    step: int
    kind: str  # "image" or "text"
    path: str  # relative to the run directory; "" when the run has no directory
    epoch: int = 0
    width: int = 0  # an image's pixels (after a batch became a grid and a large one was shrunk)
    height: int = 0
    text: str = ""
    time: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class HistogramLogged(Event):
    """The distribution of a tensor's values at a step (`log_histogram`, `[log] histograms`): `counts`
    over equal bins from `low` to `high` (bin i spans low + i*(high-low)/len(counts) onward). A name
    keeps the range of its first histogram, so its steps compare; values outside it are counted in
    the end bins, and `min`/`max` say how far they went."""

    key: str  # the name it was logged under ("samples", "weights/fc1")
    step: int
    low: float
    high: float
    counts: list[int]  # ints, one per bin
    min: float = 0.0
    max: float = 0.0
    mean: float = 0.0
    epoch: int = 0
    time: float = field(default_factory=_now)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        RunStarted,
        EpochStarted,
        PhaseStarted,
        StepStarted,
        StepCompleted,
        StepPoint,
        MetricsLogged,
        PhaseCompleted,
        EpochCompleted,
        CheckpointStarted,
        CheckpointSaved,
        CheckpointDeleted,
        CheckpointFailed,
        ControlReceived,
        RunPaused,
        RunResumed,
        OutputPrinted,
        DevicesSampled,
        RunFinished,
        RunFailed,
        JobRequeued,
        AlertRaised,
        StepSkipped,
        RolledBack,
        MediaLogged,
        HistogramLogged,
    )
}


def dumps(d: dict[str, Any]) -> str:
    """One JSON line. Python's float repr is the shortest string that reads back exactly;
    NaN and Infinity are written bare, as Python's json reads them."""
    return _ENCODER.encode(d)


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # a stray 0-d tensor or numpy scalar
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


MAX_DEPTH = 32  # nesting a field of an event read back may have (a config's tables are a few deep)
_INT_LIMIT = 1 << 63


def _int(v: Any) -> bool:
    return type(v) is int and -_INT_LIMIT < v < _INT_LIMIT


def _float(v: Any) -> bool:
    return (type(v) is float and math.isfinite(v)) or _int(v)


def _shallow(v: Any, limit: int = MAX_DEPTH) -> bool:
    """No deeper than `limit` levels of lists and dicts (their readers may recurse)."""
    todo = [(v, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth >= limit:
            return False
        todo.extend((x, depth + 1) for x in item if isinstance(x, (dict, list)))
    return True


_CHECKS: dict[str, Any] = {
    "str": lambda v: type(v) is str,
    "int": _int,
    "float": _float,
    "float | None": lambda v: v is None or _float(v),
    "bool": lambda v: type(v) is bool,
    "dict": lambda v: type(v) is dict and _shallow(v),
    "list": lambda v: type(v) is list and _shallow(v),
}
# what readers of these fields take for granted inside them
_INNER: dict[tuple[str, str], Any] = {
    ("DevicesSampled", "gpus"): lambda v: all(type(g) is dict for g in v),
    ("DevicesSampled", "cpu_per_core"): lambda v: all(_float(c) for c in v),
    ("RunFinished", "summary"): lambda v: all(type(s) is dict for s in v.values()),
    ("RunFailed", "summary"): lambda v: all(type(s) is dict for s in v.values()),
    ("HistogramLogged", "counts"): lambda v: all(_int(c) and c >= 0 for c in v),
}
_SHAPES: dict[type, tuple[tuple[str, Any, Any, bool], ...]] = {}


def _shape(cls: type) -> tuple[tuple[str, Any, Any, bool], ...]:
    """(field, check, inner check, required) for each field of an event class."""
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = tuple(
            # under `from __future__ import annotations` a field's type is its source text, a str; a
            # generic's is checked as its bare type ("list[int]" as a "list", its items by _INNER)
            (
                f.name,
                _CHECKS[str(f.type).split("[", 1)[0]],
                _INNER.get((cls.__name__, f.name)),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        )
    return shape


def from_dict(d: Any) -> Event | None:
    """An event read back from events.jsonl; None for an unknown name (a newer writer) or a line of
    the wrong shape: a field missing or of the wrong type, a non-finite time, an int past 64 bits,
    lists and dicts nested deeper than MAX_DEPTH. Keys it does not know are left out."""
    if type(d) is not dict:
        return None
    name = d.get("event")
    cls = EVENT_TYPES.get(name) if type(name) is str else None
    if cls is None:
        return None
    kwargs = {}
    for field_name, check, inner, required in _shape(cls):
        if field_name not in d:
            if required:
                return None
            continue
        v = d[field_name]
        if not check(v) or (inner is not None and not inner(v)):
            return None
        kwargs[field_name] = v
    return cls(**kwargs)


MAX_LINE = 4 << 20  # bytes an events.jsonl line may have; a longer one is skipped as damaged


def parse_line(line: str | bytes) -> Event | None:
    """One events.jsonl line as an event; None for a blank, damaged, unknown or ill-shaped one
    (never an exception: not for bytes that are not UTF-8, a line too long, nor deep nesting)."""
    if len(line) > MAX_LINE:
        return None
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    line = line.strip()
    if not line:
        return None
    try:
        return from_dict(json.loads(line))
    except (ValueError, RecursionError):  # JSONDecodeError, huge ints; nesting past the C stack
        return None


# one encoder for every line: json.dumps with options builds a new one per call
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_default)
