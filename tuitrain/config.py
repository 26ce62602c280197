"""Loading a run config: TOML file or dict -> `Config`, `--set` overrides, checks, friendly errors.

The public config API lives here (re-exported from config_schema, config_targets and
config_validate). Must not import textual, nor torch at import time: `tuitrain --help` stays fast.
"""

from __future__ import annotations

import copy
import datetime
import re
import tomllib
import typing
from pathlib import Path
from typing import Any, Sequence

from tuitrain.config_schema import (
    OPTIONAL_SECTIONS, PRECISION_ALIASES, RULES, SECTIONS, CheckpointConfig, Config, ConfigError,
    DashboardConfig, DataConfig, EarlyStoppingConfig, ExperimentConfig, LogConfig, LossConfig,
    MetricsConfig, ModelConfig, OptimizerConfig, SchedulerConfig, TrainConfig, check_type,
    describe, errors_in, suggest,
)
from tuitrain.config_targets import check_kwargs, metric_name, resolve_target, split_target

BUILTIN_METRICS = ("loss", "accuracy", "lr", "throughput", "step_time")
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
        raise ConfigError(f"expected KEY=VALUE with a dotted key (train.epochs=3), got {item!r}",
                          file=source)
    return parts, text.strip()


def apply_override(d: dict, item: str, source: str = "--set") -> None:
    """Apply one "dotted.key=TOML value" to the raw config dict `d`, creating tables as needed."""
    parts, text = _split_override(item, source)
    table = d
    for i, part in enumerate(parts[:-1]):
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{'.'.join(parts[:i + 1])} is not a table", file=source,
                              key=".".join(parts))
    table[parts[-1]] = parse_value(text)


# -- dict -> Config --------------------------------------------------------------------------

def config_from_dict(d: dict, source: str = "<config>", base_dir: Path | None = None,
                     overrides: Sequence[str] = ()) -> Config:
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
    cfg = Config(base_dir=Path(base_dir) if base_dir is not None else Path.cwd(),
                 source=source, set_keys=set_keys)
    with errors_in(source, set_keys):
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
        owners = [f"{t}.{name}" for t, cls in SECTIONS.items() if name in typing.get_type_hints(cls)]
        if owners:
            return f"unknown key at the top level (did you mean '{owners[0]}'?)"
        return "unknown key at the top level (settings live in tables such as [train])"
    return "unknown table" + suggest(name, SECTIONS)


def _parse_section(name: str, table: Any, raw_text: dict[str, str]) -> Any:
    cls = SECTIONS[name]
    check_type(table, dict, name)
    hints = typing.get_type_hints(cls)
    fields = [f for f in hints if f != "kwargs"]
    values: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{name}.{key}"
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
        if section is not None and (message := rule(getattr(section, key))):
            raise ConfigError(message, key=dotted)
    if not cfg.model.target:
        raise ConfigError('required: "module:callable" returning a torch.nn.Module',
                          key="model.target")
    if not cfg.data.target:
        raise ConfigError('required: "module:callable" returning (train, valid) datasets',
                          key="data.target")
    _one_of_name_or_target(cfg.optimizer, "optimizer", "a torch.optim class name")
    if cfg.scheduler is not None:
        _one_of_name_or_target(cfg.scheduler, "scheduler", "a torch.optim.lr_scheduler class name")
    if cfg.train.epochs == 0 and cfg.train.max_steps == 0:
        raise ConfigError("is 0 and so is train.max_steps: nothing would train", key="train.epochs")
    names = {split: _check_metrics(getattr(cfg.metrics, split), f"metrics.{split}")
             for split in ("train", "valid")}
    monitors = [("checkpoint.monitor", cfg.checkpoint.monitor)]
    if cfg.early_stopping is not None:
        monitors.append(("early_stopping.monitor", cfg.early_stopping.monitor))
    for key, monitor in monitors:
        split, _, metric = monitor.partition("/")
        if metric not in names[split]:
            listed = ", ".join(repr(n) for n in names[split]) or "none"
            raise ConfigError(f"{monitor!r} is not logged (metrics.{split}: {listed})"
                              + suggest(metric, names[split]), key=key)
    _check_revise_keys(cfg.checkpoint.revise_keys)


def _one_of_name_or_target(section: OptimizerConfig | SchedulerConfig, key: str, what: str) -> None:
    if section.name and section.target:
        raise ConfigError(f"set either {key}.name or {key}.target, not both", key=f"{key}.target")
    if not section.name and not section.target:
        raise ConfigError(f'required: {what}, or {key}.target = "module:callable"',
                          key=f"{key}.name")


def _check_metrics(items: list, key: str) -> list[str]:
    names: list[str] = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if isinstance(item, str):
            if item not in BUILTIN_METRICS and not TOPK_RE.match(item):
                raise ConfigError(
                    f"unknown metric {item!r}{suggest(item, BUILTIN_METRICS)}; built in: "
                    f"{', '.join(BUILTIN_METRICS)}, topK_accuracy, or a table with a target",
                    key=where)
        elif isinstance(item, dict):
            if "target" not in item:
                raise ConfigError('a metric table needs target = "module:callable"', key=where)
            target = check_type(item["target"], str, f"{where}.target")
            split_target(target, f"{where}.target")
            if "name" in item:
                name = check_type(item["name"], str, f"{where}.name")
                if not name or "/" in name:
                    raise ConfigError(f"must be a non-empty name without '/', got {name!r}",
                                      key=f"{where}.name")
        else:
            raise ConfigError(f"expected a metric name or a table, got {describe(item)}", key=where)
        name = metric_name(item)
        if name in names:
            raise ConfigError(f"metric {name!r} appears twice", key=where)
        names.append(name)
    return names


def _check_revise_keys(pairs: list) -> None:
    for i, pair in enumerate(pairs):
        where = f"checkpoint.revise_keys[{i}]"
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise ConfigError(f'expected ["regex", "replacement"], got {describe(pair)}', key=where)
        try:
            re.compile(pair[0])
        except re.error as e:
            raise ConfigError(f"bad regex {pair[0]!r}: {e}", key=where) from None


from tuitrain.config_validate import validate  # noqa: E402  (it uses check_values above)

__all__ = [
    "BUILTIN_METRICS", "CheckpointConfig", "Config", "ConfigError", "DashboardConfig",
    "DataConfig", "EarlyStoppingConfig", "ExperimentConfig", "LogConfig", "LossConfig",
    "MetricsConfig", "ModelConfig", "OPTIONAL_SECTIONS", "OptimizerConfig", "SchedulerConfig",
    "TrainConfig", "apply_override", "check_kwargs", "check_values", "config_from_dict",
    "load_config", "metric_name", "parse_value", "resolve_target", "validate",
]
