"""The config schema: one dataclass per TOML table, `ConfigError`, and the checks of types and values.

`parse_config(dict)` turns a TOML document (a plain dict) into a `Config`; `Config.to_dict()` turns
it back. Nothing here imports user code, torch or textual: target resolution lives in
targets.py, and the loading front (files, --set) in loading.py.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

from tuitrain.core.health import watch_keys
from tuitrain.core.sections import Checkpointing, Data, Log, Metrics, Train, table_keys  # noqa: F401


class ConfigError(Exception):
    """A problem in a config: `str(err)` is "file: key: message", printed to the user as is."""

    def __init__(self, message: str, file: str | None = None, key: str | None = None):
        self.message = message
        self.file = file
        self.key = key
        super().__init__(message)

    def __str__(self) -> str:
        return ": ".join(p for p in (self.file, self.key, self.message) if p)


def suggest(word: str, choices: typing.Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' when none is close."""
    choices = list(choices)
    # a case slip ("adamw") is the commonest typo, and difflib ranks it below near names ("Adam")
    match = [c for c in choices if c.lower() == word.lower()]
    match = match or difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


@dataclass
class ExperimentConfig:
    name: str = "experiment"
    dir: str = "runs"
    seed: int = 42


@dataclass
class ModelConfig:
    target: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: [model.NAME] sub-tables (several models): name -> ModelConfig; empty for one model
    named: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig(Data):
    """[data]: the core's `Data` (the loaders), and the factory that makes the datasets."""

    target: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Checked by `RULES` (with the file and key), not again as the core's section is."""


@dataclass
class LossConfig:
    target: str = "torch.nn:CrossEntropyLoss"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimizerConfig:
    name: str = "AdamW"
    target: str = ""
    base_batch_size: int = 0  # > 0: lr scaled by (batch_size x grad_accumulation x processes) / this
    #: parameter-name substrings ("bias", "norm") whose parameters get weight_decay = 0
    no_decay: list[str] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    named: dict[str, Any] = field(default_factory=dict)  # [optimizer.NAME]: the optimizer of model NAME


@dataclass
class SchedulerConfig:
    name: str = ""
    target: str = ""
    interval: str = "step"
    # windows run one after another: [{name = "LinearLR", end = 100, start_factor = 0.1}, {name = ...}]
    chain: list[dict[str, Any]] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    named: dict[str, Any] = field(default_factory=dict)  # [scheduler.NAME]: the scheduler of optimizer NAME


def parts(section: Any, single: str = "model") -> dict[str, Any]:
    """A model/optimizer/scheduler table as name -> table: its [x.NAME] sub-tables, or {single: itself}."""
    if section is None:
        return {}
    return dict(section.named) if section.named else {single: section}


# fields that are not keys of the TOML table
NOT_KEYS = ("kwargs", "named")


@dataclass
class TrainConfig(Train):
    """[train]: the core's `Train`, and what only a config sets (processes, phases by name, compile)."""

    epochs: int = 10
    device: str = "auto"
    max_time: str = ""  # "2h30m": when spent, stop gracefully with a checkpoint (status completed)
    strategy: str = "single"
    devices: int = 1
    phase: str = ""  # "module:Class" of the training phase; "" is tuitrain's own
    valid_phase: str = ""
    compile: bool = False  # torch.compile the model(s) (nn.Module.compile: state_dict keys unchanged)
    compile_mode: str = "default"
    requeue: bool = True  # preempted (SIGUSR1/SIGUSR2) under Slurm: `scontrol requeue $SLURM_JOB_ID` from rank 0

    def __post_init__(self) -> None:
        """Checked by `RULES` (with the file and key), not again as the core's section is."""

    #: the keys' order in config.toml and RunStarted.config (the table's own, older than its core fields')
    ORDER = (
        "epochs",
        "max_steps",
        "grad_accumulation",
        "clip_grad_norm",
        "precision",
        "device",
        "strategy",
        "devices",
        "validate_every",
        "phase",
        "valid_phase",
        "compile",
        "compile_mode",
        "validate_every_n_steps",
        "limit_valid_batches",
        "max_time",
        "requeue",
        "flops_per_step",
        "peak_tflops",
    )


@dataclass
class MetricsConfig(Metrics):
    train: list[Any] = field(default_factory=lambda: ["loss", "accuracy", "lr", "throughput"])
    valid: list[Any] = field(default_factory=lambda: ["loss", "accuracy"])

    def __post_init__(self) -> None:
        """Checked by `RULES` (with the file and key), not again as the core's section is."""


@dataclass
class EmaConfig:
    decay: float = 0.999


@dataclass
class LogConfig(Log):
    tensorboard: bool = False

    def __post_init__(self) -> None:
        """Checked by `RULES` (with the file and key), not again as the core's section is."""


@dataclass
class CheckpointConfig(Checkpointing):
    """[checkpoint]: the core's `Checkpointing`, and the weights a run starts from."""

    init_from: str = ""
    strict: bool = True
    revise_keys: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Checked by `RULES` (with the file and key), not again as the core's section is."""


@dataclass
class EarlyStoppingConfig:
    monitor: str = "valid/loss"
    mode: str = "min"
    patience: int = 5
    min_delta: float = 0.0


@dataclass
class DashboardConfig:
    theme: str = "dark"


def _watch_field(key: Any) -> tuple[str, type, Any]:
    written = key.default if key.written is None else key.written
    return key.name, key.kind, field(default=written)


#: the health rules (SPEC "Health"): a key for every key of the core's `[watch]` table
#: (tuitrain/core/health.py `watch_keys`, each rule's own in tuitrain/core/rules/), with its defaults,
#: written as the table takes them (`stall = "10m"`), and checked by the core (`RULES` below)
WatchConfig: type = dataclasses.make_dataclass(
    "WatchConfig", [_watch_field(key) for key in watch_keys().values()], namespace={"__module__": __name__}
)


@dataclass
class AlertsConfig:
    webhook: str = ""
    command: str = ""
    bell: bool = True


# table name -> dataclass, in the order of the SPEC (and of Config.to_dict)
SECTIONS: dict[str, type] = {
    "experiment": ExperimentConfig,
    "model": ModelConfig,
    "data": DataConfig,
    "loss": LossConfig,
    "optimizer": OptimizerConfig,
    "scheduler": SchedulerConfig,
    "train": TrainConfig,
    "metrics": MetricsConfig,
    "log": LogConfig,
    "checkpoint": CheckpointConfig,
    "early_stopping": EarlyStoppingConfig,
    "ema": EmaConfig,
    "dashboard": DashboardConfig,
    "watch": WatchConfig,
    "alerts": AlertsConfig,
}
OPTIONAL_SECTIONS = ("scheduler", "early_stopping", "ema")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
PRECISION_ALIASES = {"16": "16-mixed", "bf16": "bf16-mixed", "32-true": "32", "fp32": "32"}
STRATEGIES = ("single", "ddp", "fsdp")
DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass
class Config:
    """The whole run config; optional tables are None when absent."""

    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig | None = None
    train: TrainConfig = field(default_factory=TrainConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    early_stopping: EarlyStoppingConfig | None = None
    ema: EmaConfig | None = None
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    watch: Any = field(default_factory=WatchConfig)  # a WatchConfig
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    path: Path | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    #: how errors name this config ("spirals.toml", "<config>")
    source: str = field(default="<config>", repr=False, compare=False)
    #: dotted keys set by --set -> the name errors give them ("--set")
    set_keys: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: the [sweep] table as written: `tuitrain sweep` reads and checks it (tuitrain/run/sweep_spec.py);
    #: a run of the config leaves it alone, and its config.toml does not hold it
    sweep: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict as in the TOML: kwargs back inside their tables, None tables left out."""
        out: dict[str, Any] = {}
        for name in SECTIONS:
            section = getattr(self, name)
            if section is None:
                continue
            out[name] = _table(section)
        return out

    def to_toml(self) -> str:
        from tuitrain.config.toml_writer import dumps

        return dumps(self.to_dict())


def _table(section: Any) -> dict[str, Any]:
    if getattr(section, "named", None):
        return {name: _table(sub) for name, sub in section.named.items()}
    table: dict[str, Any] = {}
    order = getattr(section, "ORDER", ("name", "target"))  # a table's own order; else name and target first
    fields = sorted(dataclasses.fields(section), key=lambda f: order.index(f.name) if f.name in order else len(order))
    for f in fields:
        if "toml" in f.metadata:  # set from another table, or from Python only
            continue
        value = getattr(section, f.name)
        if f.name == "kwargs":
            table.update(_plain(value))
        elif f.name != "named":
            table[f.name] = _plain(value)
    return table


def _plain(value: Any) -> Any:
    """A deep copy made of dicts and lists, so to_dict never shares state with the config."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def origin(key: str | None, set_keys: dict[str, str], source: str) -> str:
    """The file an error at `key` belongs to: the --set source when an override set it."""
    if key:
        for set_key, set_source in set_keys.items():
            if (
                set_key == key
                or key.startswith(set_key + ".")
                or key.startswith(set_key + "[")
                or set_key.startswith(key + ".")
            ):
                return set_source
    return source


@contextmanager
def errors_in(source: str, set_keys: dict[str, str]) -> Iterator[None]:
    """Name the file (or --set) in every ConfigError raised inside that does not name one yet."""
    try:
        yield
    except ConfigError as e:
        if e.file is None:
            e.file = origin(e.key, set_keys, source)
        raise


# -- types -----------------------------------------------------------------------------------

_TYPE_WORDS = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    list: "an array",
    dict: "a table",
}


def describe(value: Any) -> str:
    """How an error message shows a value the user wrote."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    kind = {int: "an integer", float: "a float"}.get(type(value), f"a {type(value).__name__}")
    return f"{value!r} ({kind})"


def check_type(value: Any, kind: Any, key: str) -> Any:
    """`value` as `kind` (int widens to float); ConfigError(key) when it is another type. A generic
    kind (a field's `list[str]`) is checked as its bare type; what it holds is the field's rule's to check."""
    kind = typing.get_origin(kind) or kind
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        bool: isinstance(value, bool),
        str: isinstance(value, str),
        list: isinstance(value, list),
        dict: isinstance(value, dict),
    }[kind]
    if not ok:
        raise ConfigError(f"expected {_TYPE_WORDS[kind]}, got {describe(value)}", key=key)
    return float(value) if kind is float else value


# -- values ----------------------------------------------------------------------------------


def _at_least(low: int | float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be >= {low}, got {v}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(v: str) -> str | None:
        if v in choices:
            return None
        return f"expected one of {', '.join(map(repr, choices))}, got {v!r}" + suggest(v, choices)

    return check


def _finite_non_negative(v: float) -> str | None:
    return None if math.isfinite(v) and v >= 0 else f"must be a finite number >= 0, got {v}"


def _run_name(v: str) -> str | None:
    if not v or v in (".", "..") or "/" in v or "\\" in v:
        return f"must be a folder name (no '/'), got {v!r}"
    return None


def _device(v: str) -> str | None:
    return None if DEVICE_RE.match(v) else (f"expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {v!r}")


def _target_format(v: str) -> str | None:
    if not v or TARGET_RE.match(v):
        return None
    hint = ""
    if ":" not in v and "." in v:
        hint = " (did you mean '{}:{}'?)".format(*v.rsplit(".", 1))
    return f'expected "module:callable", got {v!r}{hint}'


def _duration(v: str) -> str | None:
    from tuitrain.core.control import parse_duration

    try:
        parse_duration(v)
    except ValueError as e:
        return str(e)
    return None


def _url(v: str) -> str | None:
    if v == "" or v.startswith(("http://", "https://")):
        return None
    return f'expected an http:// or https:// URL (or "" for none), got {v!r}'


def _decay(v: float) -> str | None:
    return None if 0.0 < v < 1.0 else f"must be between 0 and 1 (exclusive), e.g. 0.999; got {v}"


def _names(v: list[Any]) -> str | None:
    bad = [x for x in v if not isinstance(x, str) or not x]
    return f'expected parameter-name substrings such as "bias", got {describe(bad[0])}' if bad else None


def _samples(v: dict[str, Any]) -> str | None:
    """[log] samples: {} or { target = "module:function", every_n_steps = N }."""
    if not v:
        return None
    unknown = sorted(set(v) - {"target", "every_n_steps"})
    if unknown:
        return f"unknown key {unknown[0]!r} (samples takes target and every_n_steps)" + suggest(
            unknown[0], ("target", "every_n_steps")
        )
    target = v.get("target")
    if not isinstance(target, str) or not target:
        return 'expected { target = "module:function", every_n_steps = N }: target is missing'
    if bad := _target_format(target):
        return f"target: {bad}"
    n = v.get("every_n_steps", 500)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return f"every_n_steps must be a whole number of 1 or more, got {n!r}"
    return None


def _histogram_kinds(v: list[Any]) -> str | None:
    bad = [x for x in v if x not in ("weights", "grads")]
    return (
        f'expected a list of "weights" and "grads", got {describe(bad[0])}' + suggest(str(bad[0]), ("weights", "grads"))
        if bad
        else None
    )


def _monitor_format(v: str) -> str | None:
    split, _, metric = v.partition("/")
    if split in ("train", "valid") and metric:
        return None
    return f'expected "train/<metric>" or "valid/<metric>", got {v!r}'


# dotted key -> check of the (type-checked) value; returns an error message or None
RULES: dict[str, Callable[[Any], str | None]] = {
    "experiment.name": _run_name,
    "experiment.seed": _at_least(0),
    "model.target": _target_format,
    "data.target": _target_format,
    "data.batch_size": _at_least(1),
    "data.num_workers": _at_least(0),
    "loss.target": _target_format,
    "optimizer.target": _target_format,
    "scheduler.target": _target_format,
    "scheduler.interval": _one_of("step", "epoch"),
    "train.epochs": _at_least(0),
    "train.max_steps": _at_least(0),
    "train.grad_accumulation": _at_least(1),
    "train.clip_grad_norm": _finite_non_negative,
    "train.precision": _one_of(*PRECISIONS),
    "train.device": _device,
    "train.strategy": _one_of(*STRATEGIES),
    "train.compile_mode": _one_of("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
    "optimizer.base_batch_size": _at_least(0),
    "train.devices": _at_least(1),
    "train.validate_every": _at_least(1),
    "train.validate_every_n_steps": _at_least(0),
    "train.limit_valid_batches": _at_least(0),
    "train.max_time": _duration,
    "train.flops_per_step": _finite_non_negative,
    "train.peak_tflops": _finite_non_negative,
    "optimizer.no_decay": _names,
    "metrics.throughput_unit": _one_of("samples", "tokens"),
    "ema.decay": _decay,
    "train.phase": _target_format,
    "train.valid_phase": _target_format,
    "log.every_n_steps": _at_least(1),
    "log.samples": _samples,
    "log.histograms": _histogram_kinds,
    "log.histograms_every_n_steps": _at_least(0),
    "log.media_keep": _at_least(0),
    "checkpoint.every_n_epochs": _at_least(0),
    "checkpoint.every_n_steps": _at_least(0),
    "checkpoint.keep_last": _at_least(0),
    "checkpoint.keep_best": _at_least(0),
    "checkpoint.keep_requested": _at_least(0),
    "checkpoint.monitor": _monitor_format,
    "checkpoint.mode": _one_of("min", "max"),
    "early_stopping.monitor": _monitor_format,
    "early_stopping.mode": _one_of("min", "max"),
    "early_stopping.patience": _at_least(0),
    "early_stopping.min_delta": _finite_non_negative,
    "alerts.webhook": _url,
}


def _watch_rule(read: Callable[[Any], Any]) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        try:
            read(v)
        except ValueError as e:
            return str(e)
        return None

    return check


RULES.update((f"watch.{name}", _watch_rule(key.read)) for name, key in watch_keys().items())
