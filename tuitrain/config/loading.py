"""Loading a run config: TOML file or dict -> `Config`, `--set` overrides, checks, friendly errors.

The package's `__init__` re-exports the public config API from here, schema.py, targets.py and
validation.py. Must not import textual, nor torch at import time: `tuitrain --help` stays fast.
"""

from __future__ import annotations

import copy
import datetime
import re
import tomllib
import typing
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from tuitrain.core.sections import table_keys
from tuitrain.config.schema import (
    OPTIONAL_SECTIONS,
    PRECISION_ALIASES,
    RULES,
    SECTIONS,
    CheckpointConfig,
    Config,
    ConfigError,
    DashboardConfig,
    DataConfig,
    EarlyStoppingConfig,
    ExperimentConfig,
    LogConfig,
    LossConfig,
    NOT_KEYS,
    MetricsConfig,
    ModelConfig,
    OptimizerConfig,
    SchedulerConfig,
    TrainConfig,
    check_type,
    describe,
    errors_in,
    parts,
    suggest,
)
from tuitrain.config.targets import check_kwargs, metric_name, resolve_target, split_target

BUILTIN_METRICS = (
    "loss",
    "accuracy",
    "lr",
    "throughput",
    "step_time",
    "grad_norm",
    "data_wait",
    "tflops",
    "mfu",
    "max_memory",
)
TOPK_RE = re.compile(r"^top([1-9]\d*)_accuracy$")


# -- --set overrides -------------------------------------------------------------------------


def parse_value(text: str) -> Any:
    """A --set value: TOML when it reads as one value, else the text itself (a bare string)."""
    try:
        doc = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text
    value = doc.get("v")
    if list(doc) != ["v"] or isinstance(value, (datetime.date, datetime.time)):
        return text  # "a=1\nb=2" smuggling, or a date where a name was meant
    return value


def _split_override(item: str, source: str) -> tuple[list[str], str]:
    key, sep, text = item.partition("=")
    parts = [p.strip() for p in key.split(".")]
    if not sep or not all(parts):
        raise ConfigError(f"expected KEY=VALUE with a dotted key (train.epochs=3), got {item!r}", file=source)
    return parts, text.strip()


def apply_override(d: dict[str, Any], item: str, source: str = "--set") -> None:
    """Apply one "dotted.key=TOML value" to the raw config dict `d`, creating tables as needed."""
    parts, text = _split_override(item, source)
    table = d
    for i, part in enumerate(parts[:-1]):
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{'.'.join(parts[: i + 1])} is not a table", file=source, key=".".join(parts))
    table[parts[-1]] = parse_value(text)


# -- dict -> Config --------------------------------------------------------------------------


def config_from_dict(
    d: dict[str, Any], source: str = "<config>", base_dir: Path | None = None, overrides: Sequence[str] = ()
) -> Config:
    """A type-checked Config from a TOML-shaped dict, after applying `overrides` (--set items)."""
    if not isinstance(d, dict):
        raise ConfigError(f"expected a table of tables, got {describe(d)}", file=source)
    data = copy.deepcopy(d)
    set_keys: dict[str, str] = {}
    raw_text: dict[str, str] = {}
    for item in overrides:
        apply_override(data, item, "--set")
        parts, text = _split_override(item, "--set")
        set_keys[".".join(parts)] = "--set"
        if parts[0] not in d:  # a table that only --set made: all its errors belong to --set
            set_keys[parts[0]] = "--set"
        raw_text[".".join(parts)] = text
    cfg = Config(base_dir=Path(base_dir) if base_dir is not None else Path.cwd(), source=source, set_keys=set_keys)
    with errors_in(source, set_keys):
        if isinstance(data.get("sweep"), dict):  # `tuitrain sweep`'s table: checked there
            cfg.sweep = data.pop("sweep")
        for name, table in data.items():
            if name not in SECTIONS:
                raise ConfigError(_unknown_table(name, table), key=name)
            setattr(cfg, name, _parse_section(name, table, raw_text))
        check_values(cfg)
    return cfg


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read a TOML config file, apply --set overrides, check every value; ConfigError otherwise."""
    source = str(path)
    p = Path(path).expanduser()
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file", file=source) from None
    except IsADirectoryError:
        raise ConfigError("is a folder, not a TOML file", file=source) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", file=source) from None
    except OSError as e:
        raise ConfigError(e.strerror or str(e), file=source) from None
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"invalid TOML: {e}", file=source) from None
    cfg = config_from_dict(d, source=source, base_dir=p.resolve().parent, overrides=overrides)
    cfg.path = p.resolve()
    return cfg


def _unknown_table(name: str, value: Any) -> str:
    if not isinstance(value, dict):  # a top-level key: say which table it belongs in
        owners = [f"{t}.{name}" for t, cls in SECTIONS.items() if name in table_keys(cls)]
        if owners:
            return f"unknown key at the top level (did you mean '{owners[0]}'?)"
        return "unknown key at the top level (settings live in tables such as [train])"
    return "unknown table" + suggest(name, SECTIONS)


NAMED_SECTIONS = ("model", "optimizer", "scheduler")  # may hold [x.NAME] sub-tables, one per model


def _parse_section(name: str, table: Any, raw_text: dict[str, str], where: str | None = None) -> Any:
    cls = SECTIONS[name]
    where = where or name
    check_type(table, dict, where)
    hints = typing.get_type_hints(cls)
    keys = table_keys(cls)
    fields = [f for f in hints if f not in NOT_KEYS and f in keys]
    if where == name and name in NAMED_SECTIONS and _is_named(table, fields, name):
        named = {sub: _parse_section(name, t, raw_text, f"{name}.{sub}") for sub, t in table.items()}
        return cls(**{"named": named, **({"name": ""} if "name" in fields else {})})
    values: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{where}.{key}"
        if key in fields:
            kind = hints[key]
            if kind is str and not isinstance(value, str) and dotted in raw_text:
                value = raw_text[dotted]  # --set experiment.name=2024 means the string
            if dotted == "train.precision":
                value = _precision(value)
            values[key] = check_type(value, kind, dotted)
        elif "kwargs" in hints:
            kwargs[key] = value  # every other key of a target table is a keyword argument
        else:
            raise ConfigError("unknown key" + suggest(key, fields), key=dotted)
    if "kwargs" in hints:
        values["kwargs"] = kwargs
    if name == "optimizer" and table.get("target") and "name" not in table:
        values["name"] = ""  # a target replaces the default "AdamW"
    return cls(**values)


def _is_named(table: dict[str, Any], fields: list[str], name: str) -> bool:
    """[model.generator] and [model.discriminator] rather than one [model]: every key is a table
    and none is a setting of [model] itself. A mix of the two is an error naming the odd key."""
    if not table or any(k in fields for k in table):
        return False
    subs = [k for k, v in table.items() if isinstance(v, dict) and ("target" in v or "name" in v)]
    others = [k for k, v in table.items() if not isinstance(v, dict)]
    if subs and others:
        raise ConfigError(
            f"[{name}.{subs[0]}] is a named table, so every key of [{name}] must be a "
            f"[{name}.NAME] table; move this key into one of them",
            key=f"{name}.{others[0]}",
        )
    return not others


def _precision(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value in (16, 32):
        value = str(value)  # precision = 32 reads as naturally as "32"
    return PRECISION_ALIASES.get(value, value) if isinstance(value, str) else value


# -- value checks ----------------------------------------------------------------------------


def check_values(cfg: Config) -> None:
    """Every check that needs no import: ranges, enums, required keys, metrics and monitors."""
    for dotted, rule in RULES.items():
        section_name, key = dotted.split(".")
        section = getattr(cfg, section_name)
        for where, part in named_parts(section, section_name):
            if message := rule(getattr(part, key)):
                raise ConfigError(message, key=f"{where}.{key}")
    for where, model in named_parts(cfg.model, "model"):
        if not model.target:
            mixed = [k for k, v in model.kwargs.items() if isinstance(v, dict)]
            hint = (
                f" (or only [model.NAME] tables for several models; [model] also has {mixed[0]!r})"
                if mixed and where == "model"
                else ""
            )
            raise ConfigError('required: "module:callable" returning a torch.nn.Module' + hint, key=f"{where}.target")
    if not cfg.data.target:
        raise ConfigError('required: "module:callable" returning (train, valid) datasets', key="data.target")
    for where, opt in named_parts(cfg.optimizer, "optimizer"):
        _one_of_name_or_target(opt, where, "a torch.optim class name")
    for where, sched in named_parts(cfg.scheduler, "scheduler"):
        if sched.chain:
            _check_chain(sched, where)
        else:
            _one_of_name_or_target(sched, where, "a torch.optim.lr_scheduler class name")
    _check_named(cfg)
    if cfg.train.epochs == 0 and cfg.train.max_steps == 0:
        raise ConfigError("is 0 and so is train.max_steps: nothing would train", key="train.epochs")
    # a phase of the user's may return named values that metrics of those names log
    own = {"train": bool(cfg.train.phase), "valid": bool(cfg.train.valid_phase)}
    names = {
        split: _check_metrics(getattr(cfg.metrics, split), f"metrics.{split}", own[split])
        for split in ("train", "valid")
    }
    monitors = [("checkpoint.monitor", cfg.checkpoint.monitor)]
    if cfg.early_stopping is not None:
        monitors.append(("early_stopping.monitor", cfg.early_stopping.monitor))
    for key, monitor in monitors:
        split, _, metric = monitor.partition("/")
        if metric not in names[split]:
            listed = ", ".join(repr(n) for n in names[split]) or "none"
            raise ConfigError(
                f"{monitor!r} is not logged (metrics.{split}: {listed})" + suggest(metric, names[split]), key=key
            )
    _check_revise_keys(cfg.checkpoint.revise_keys)
    if cfg.ema is not None and cfg.train.strategy == "fsdp":
        raise ConfigError(
            'an average of sharded weights is not supported: remove [ema] or use strategy "ddp"', key="ema.decay"
        )


def named_parts(section: Any, name: str) -> list[tuple[str, Any]]:
    """(dotted name, table) of a section's [x.NAME] sub-tables, or of the section itself."""
    if section is None:
        return []
    if getattr(section, "named", None):
        return [(f"{name}.{sub}", part) for sub, part in section.named.items()]
    return [(name, section)]


def _check_named(cfg: Config) -> None:
    """[optimizer.NAME] names a model, [scheduler.NAME] an optimizer; several models need a phase."""
    models = parts(cfg.model)
    optimizers = parts(cfg.optimizer) if cfg.optimizer.named else dict.fromkeys(models)
    for kind, names, owners, owner_kind in (
        ("optimizer", cfg.optimizer.named, models, "model"),
        ("scheduler", cfg.scheduler.named if cfg.scheduler else {}, optimizers, "optimizer"),
    ):
        for sub in names:
            if sub not in owners:
                listed = ", ".join(repr(n) for n in owners)
                raise ConfigError(
                    f"no {owner_kind} named {sub!r} (the {owner_kind}s: {listed})" + suggest(sub, owners),
                    key=f"{kind}.{sub}",
                )
    if len(models) > 1 and not cfg.train.phase:
        listed = ", ".join(f"[model.{n}]" for n in models)
        raise ConfigError(
            f'required with several models ({listed}): "module:Class", a CustomTrainPhase whose step trains them',
            key="train.phase",
        )


def chain_parts(sched: SchedulerConfig, where: str) -> list[tuple[str, SchedulerConfig, int, int | None]]:
    """(key, scheduler of one window, begin, end or None) for each window of `chain`."""
    out, begin = [], 0
    for i, item in enumerate(sched.chain):
        key = f"{where}.chain[{i}]"
        if not isinstance(item, dict):
            raise ConfigError('each window is a table: { name = "LinearLR", end = 100, ... }', key=key)
        b: int = item.get("begin", begin)  # whole numbers, checked below
        e: int | None = item.get("end")
        for k, v in (("begin", b), ("end", e)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ConfigError(f"{k} must be a whole number of {sched.interval}s >= 0", key=f"{key}.{k}")
        if i == 0 and b != 0:
            raise ConfigError("the first window begins at 0", key=f"{key}.begin")
        if b < begin or (e is not None and e <= b):
            raise ConfigError(
                f"windows run one after another: begin {b} must follow {begin} and end after it", key=f"{key}.begin"
            )
        part = SchedulerConfig(
            name=item.get("name", ""),
            target=item.get("target", ""),
            interval=sched.interval,
            kwargs={k: v for k, v in item.items() if k not in ("name", "target", "begin", "end")},
        )
        _one_of_name_or_target(part, key, "a torch.optim.lr_scheduler class name")
        out.append((key, part, b, e))
        begin = e if e is not None else b + 1
    return out


def _check_chain(sched: SchedulerConfig, where: str) -> None:
    if sched.name or sched.target or sched.kwargs:
        raise ConfigError(
            "a scheduler with a chain takes its classes and arguments from the windows only", key=f"{where}.chain"
        )
    chain_parts(sched, where)


def _one_of_name_or_target(section: OptimizerConfig | SchedulerConfig, key: str, what: str) -> None:
    if section.name and section.target:
        raise ConfigError(f"set either {key}.name or {key}.target, not both", key=f"{key}.target")
    if not section.name and not section.target:
        raise ConfigError(f'required: {what}, or {key}.target = "module:callable"', key=f"{key}.name")


def _check_metrics(items: list[Any], key: str, step_values: bool = False) -> list[str]:
    names: list[str] = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if isinstance(item, str):
            known = item in BUILTIN_METRICS or TOPK_RE.match(item)
            if not known and not item.isidentifier():
                raise ConfigError(
                    f"a value the step returns needs a name like 'perplexity', got {item!r}"
                    + suggest(item, BUILTIN_METRICS),
                    key=where,
                )
            # another name is a value the step returns ({"loss": ..., "perplexity": ...}); a near miss
            # of a built-in name is a typo, unless a phase of the user's returns values by name
            if not known and not step_values and suggest(item, BUILTIN_METRICS):
                raise ConfigError(
                    f"unknown metric {item!r}{suggest(item, BUILTIN_METRICS)}; built in: "
                    f"{', '.join(BUILTIN_METRICS)}, topK_accuracy, a value your train_step/valid_step "
                    "returns by name, or a table with a target",
                    key=where,
                )
        elif isinstance(item, dict):
            if "target" not in item:
                raise ConfigError('a metric table needs target = "module:callable"', key=where)
            target = check_type(item["target"], str, f"{where}.target")
            split_target(target, f"{where}.target")
            if "name" in item:
                name = check_type(item["name"], str, f"{where}.name")
                if not name or "/" in name:
                    raise ConfigError(f"must be a non-empty name without '/', got {name!r}", key=f"{where}.name")
        else:
            raise ConfigError(f"expected a metric name or a table, got {describe(item)}", key=where)
        name = metric_name(item)
        if name in names:
            raise ConfigError(f"metric {name!r} appears twice", key=where)
        names.append(name)
    return names


def _check_revise_keys(pairs: list[Any]) -> None:
    for i, pair in enumerate(pairs):
        where = f"checkpoint.revise_keys[{i}]"
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise ConfigError(f'expected ["regex", "replacement"], got {describe(pair)}', key=where)
        try:
            re.compile(pair[0])
        except re.error as e:
            raise ConfigError(f"bad regex {pair[0]!r}: {e}", key=where) from None


__all__ = [
    "BUILTIN_METRICS",
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "DashboardConfig",
    "DataConfig",
    "EarlyStoppingConfig",
    "ExperimentConfig",
    "LogConfig",
    "LossConfig",
    "MetricsConfig",
    "ModelConfig",
    "OPTIONAL_SECTIONS",
    "OptimizerConfig",
    "SchedulerConfig",
    "TrainConfig",
    "apply_override",
    "check_kwargs",
    "check_values",
    "config_from_dict",
    "load_config",
    "metric_name",
    "named_parts",
    "parse_value",
    "resolve_target",
]
