"""The Learner's settings, grouped as a config's TOML tables group them: `Experiment`, `Train`, `Data`,
`Metrics`, `Log`, `Checkpointing` (and `Watch`, in health.py). Each checks its own values once, as it is
made; the config schema (tuitrain/config/schema.py) builds these same classes from TOML, adding the keys
only a config has (targets, `train.strategy` ...).

A field a TOML table does not hold (set from another table, or from Python only) is marked
`metadata={"toml": ...}`: the key that sets it in a config ("ema.decay"), or "" for none. Must not import
torch at module level, textual, or anything outside tuitrain.core.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import os

    from .checkpoint import Checkpointer


def _not_in_table(key: str = "") -> dict[str, str]:
    """Metadata of a field a TOML table does not hold: `key` is where a config sets it ("" nowhere)."""
    return {"toml": key}


def table_keys(cls: type[Any]) -> list[str]:
    """The names of `cls`'s fields that are keys of its TOML table."""
    return [f.name for f in dataclasses.fields(cls) if "toml" not in f.metadata]


def _whole(section: str, name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{section}.{name} must be a whole number of {low} or more, not {value!r}")


def _number(section: str, name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{section}.{name} must be a finite number of 0 or more, not {value!r}")


def _one_of(section: str, name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{section}.{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")


@dataclass
class Experiment:
    """What the run is: its name, the seed, and what it records (`config` in RunStarted and in every
    checkpoint, `env` added to RunStarted.env, `notes` said in the log after RunStarted)."""

    name: str = ""
    seed: Any = None  # None: not seeded (the data order from seed 0)
    config: dict[str, Any] = field(default_factory=dict, metadata=_not_in_table())
    env: dict[str, Any] = field(default_factory=dict, metadata=_not_in_table())
    notes: list[str] = field(default_factory=list, metadata=_not_in_table())

    def __post_init__(self) -> None:
        if self.seed is not None:
            _whole("experiment", "seed", self.seed, 0)


@dataclass
class Train:
    """How long and how the model trains."""

    epochs: int = 1
    max_steps: int = 0  # 0: no limit
    grad_accumulation: int = 1
    clip_grad_norm: float = 0.0  # 0: off
    precision: str = "32"
    device: Any = "auto"  # "auto", "cpu", "cuda", "cuda:1", "mps" or a torch.device
    validate_every: int = 1  # epochs
    validate_every_n_steps: int = 0  # > 0: every N optimizer steps instead (and at the end)
    limit_valid_batches: int = 0  # > 0: at most this many validation batches each time
    max_time: Any = 0.0  # seconds, or "2h30m": when spent (across resumes) the run stops as completed
    flops_per_step: float = 0.0  # FLOPs of one optimizer step (tflops, mfu); 0: counted on the first batch
    peak_tflops: float = 0.0  # one device's peak TFLOP/s (mfu); 0: the GPU table's
    #: > 0: an exponential moving average of the weights (validated, checkpointed, in model.pt)
    ema_decay: float = field(default=0.0, metadata=_not_in_table("ema.decay"))
    #: when the scheduler steps: "step" or "epoch" (or a dict by optimizer name)
    scheduler_interval: Any = field(default="step", metadata=_not_in_table("scheduler.interval"))

    def __post_init__(self) -> None:
        for name, low in (
            ("epochs", 0),
            ("max_steps", 0),
            ("grad_accumulation", 1),
            ("validate_every", 1),
            ("validate_every_n_steps", 0),
            ("limit_valid_batches", 0),
        ):
            _whole("train", name, getattr(self, name), low)
        for name in ("clip_grad_norm", "flops_per_step", "peak_tflops"):
            _number("train", name, getattr(self, name))
        if self.ema_decay and not 0.0 < self.ema_decay < 1.0:
            raise ValueError(f"train.ema_decay must be between 0 and 1 (exclusive), not {self.ema_decay!r}")
        if isinstance(self.max_time, str):
            if self.max_time:
                from .control import parse_duration

                parse_duration(self.max_time)  # a ValueError names what is wrong
        else:
            _number("train", "max_time", self.max_time)
        intervals = (
            self.scheduler_interval.values() if isinstance(self.scheduler_interval, dict) else [self.scheduler_interval]
        )
        for value in intervals:
            _one_of("train", "scheduler_interval", value, ("step", "epoch"))

    def seconds(self) -> float:
        """`max_time` in seconds (0: no budget)."""
        if isinstance(self.max_time, str):
            from .control import parse_duration

            return parse_duration(self.max_time) if self.max_time else 0.0
        return float(self.max_time)


@dataclass
class Data:
    """How loaders are built from Datasets (a DataLoader given keeps its own)."""

    batch_size: int = 32
    num_workers: int = 0
    shuffle: bool = True  # the training loader (validation is never shuffled)
    drop_last: bool = False
    pin_memory: bool = False

    def __post_init__(self) -> None:
        _whole("data", "batch_size", self.batch_size, 1)
        _whole("data", "num_workers", self.num_workers, 0)


@dataclass
class Metrics:
    """What each split logs: names, `Metric` objects or torchmetrics metrics."""

    train: list[Any] = field(default_factory=lambda: ["loss"])
    valid: list[Any] = field(default_factory=lambda: ["loss"])
    throughput_unit: str = "samples"  # "tokens": throughput counts the target's elements

    def __post_init__(self) -> None:
        _one_of("metrics", "throughput_unit", self.throughput_unit, ("samples", "tokens"))


@dataclass
class Log:
    """How often step metrics are logged, whether what the code prints joins the run's log, and the
    samples and distributions logged as the run goes (core/media.py)."""

    every_n_steps: int = 10
    #: what the user's code prints or logs during fit becomes OutputPrinted events (a config's runs always)
    capture_output: bool = field(default=False, metadata=_not_in_table())
    #: {"target": fn or "module:function" (a config's, resolved by run/build.py), "every_n_steps": N}:
    #: `fn(model, step)` is called every N steps in eval mode under no_grad; what it returns (a string, an
    #: image, or a dict of them by name) is logged. A bare callable: every 500 steps
    samples: dict[str, Any] = field(default_factory=dict)  # (a bare function is taken too)
    #: "weights" and/or "grads": each top-level module's, every `histograms_every_n_steps` steps
    histograms: list[str] = field(default_factory=list)
    histograms_every_n_steps: int = 0
    media_keep: int = 100  # files kept per logged name, thinned evenly over the run; 0: all

    def __post_init__(self) -> None:
        _whole("log", "every_n_steps", self.every_n_steps, 1)
        _whole("log", "histograms_every_n_steps", self.histograms_every_n_steps, 0)
        _whole("log", "media_keep", self.media_keep, 0)
        for kind in self.histograms:
            _one_of("log", "histograms", kind, HISTOGRAM_KINDS)
        if callable(self.samples):
            self.samples = {"target": self.samples, "every_n_steps": SAMPLES_EVERY}
        elif not isinstance(self.samples, dict):
            raise ValueError(
                f"log.samples takes a function (model, step) or {{target, every_n_steps}}, not {self.samples!r}"
            )
        elif self.samples:
            _whole("log", "samples.every_n_steps", self.samples.get("every_n_steps", SAMPLES_EVERY), 1)

    @property
    def samples_every(self) -> int:
        """Steps between samples (0: none)."""
        return int(self.samples.get("every_n_steps", SAMPLES_EVERY)) if self.samples.get("target") else 0


HISTOGRAM_KINDS = ("weights", "grads")
SAMPLES_EVERY = 500  # a samples function's steps between calls when the config does not say


@dataclass
class Checkpointing:
    """When checkpoints are written and which are kept (RUN_DIR/checkpoint); `model_path`: where the
    final weights go ("": RUN_DIR/model.pt)."""

    every_n_epochs: int = 1
    every_n_steps: int = 0
    keep_last: int = 2
    keep_best: int = 1
    keep_requested: int = 0  # those asked for (c, `tuitrain checkpoint`, a stop's): 0 keeps them all
    monitor: str = "valid/loss"
    mode: str = "min"
    model_path: str = field(default="", metadata=_not_in_table())

    def __post_init__(self) -> None:
        for name in ("every_n_epochs", "every_n_steps", "keep_last", "keep_best", "keep_requested"):
            _whole("checkpoint", name, getattr(self, name), 0)
        _one_of("checkpoint", "mode", self.mode, ("min", "max"))

    def checkpointer(self, folder: str | os.PathLike[str]) -> Checkpointer:
        """The `Checkpointer` of `folder` with these settings."""
        from .checkpoint import Checkpointer

        return Checkpointer(
            folder,
            keep_last=self.keep_last,
            keep_best=self.keep_best,
            monitor=self.monitor,
            mode=self.mode,
            every_n_epochs=self.every_n_epochs,
            every_n_steps=self.every_n_steps,
            keep_requested=self.keep_requested,
        )


#: the flat keywords `CoreLearner(...)` still takes, and the section field each one sets
SHORTCUTS: dict[str, tuple[str, str]] = {
    "epochs": ("train", "epochs"),
    "max_steps": ("train", "max_steps"),
    "grad_accumulation": ("train", "grad_accumulation"),
    "clip_grad_norm": ("train", "clip_grad_norm"),
    "precision": ("train", "precision"),
    "device": ("train", "device"),
    "batch_size": ("data", "batch_size"),
    "shuffle": ("data", "shuffle"),
    "num_workers": ("data", "num_workers"),
    "seed": ("experiment", "seed"),
    "train_metrics": ("metrics", "train"),
    "valid_metrics": ("metrics", "valid"),
    "log_every_n_steps": ("log", "every_n_steps"),
    "capture_output": ("log", "capture_output"),
}

SECTIONS = {
    "experiment": Experiment,
    "train": Train,
    "data": Data,
    "metrics": Metrics,
    "log": Log,
    "checkpoint": Checkpointing,
}


def with_shortcuts(sections: Mapping[str, Any], shortcuts: Mapping[str, Any]) -> dict[str, Any]:
    """`sections` (name -> a section or None) with the flat keywords applied over them: a TypeError for
    a keyword that is not one (naming its section's field when it has one). A section may be given as a
    dict of its fields (`metrics={"valid": ["loss", "accuracy"]}`)."""
    out = {name: _section(name, cls, sections.get(name)) for name, cls in SECTIONS.items()}
    changes: dict[str, dict[str, Any]] = {}
    for key, value in shortcuts.items():
        where = SHORTCUTS.get(key)
        if where is None:
            raise TypeError(f"CoreLearner() got an unexpected keyword argument {key!r}{_hint(key)}")
        changes.setdefault(where[0], {})[where[1]] = value
    for name, values in changes.items():
        out[name] = dataclasses.replace(out[name], **values)
    return out


def _section(name: str, cls: type, given: Any) -> Any:
    """A section as given: its class, a dict of its fields, or None (the defaults); a TypeError otherwise."""
    if given is None:
        return cls()
    if isinstance(given, Mapping):
        fields = {f.name for f in dataclasses.fields(cls)}
        for key in given:
            if key not in fields:
                raise TypeError(
                    f"{name}={{...}}: {cls.__name__} has no field {key!r}; its fields: {', '.join(sorted(fields))}"
                )
        return cls(**given)
    if not isinstance(given, cls):
        raise TypeError(f"{name}= takes a {cls.__name__} or a dict of its fields, not {type(given).__name__}")
    return given


def _hint(key: str) -> str:
    """Where a flat keyword that is no longer taken now goes ("; use train=Train(max_time=...)")."""
    for name, cls in SECTIONS.items():
        if any(f.name == key for f in dataclasses.fields(cls)):
            return f"; use {name}={cls.__name__}({key}=...)"
    old = {"checkpointer": "checkpoint=Checkpointer(...)", "sinks": "a bus with its sinks subscribed (bus=...)"}
    return f"; use {old[key]}" if key in old else ""
