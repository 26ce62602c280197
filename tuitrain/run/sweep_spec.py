"""A config's `[sweep]` table, read and checked before anything trains (SPEC "Sweeps").

Each parameter is a config key that `--set` could set, with a range (`low`, `high`, optional `log` or
`step`) or a list of `choices`. A parameter's every value is checked as `--set KEY=VALUE` would check it
(the config built with it), so a bad name or a value the config refuses is a config error here, naming
`sweep.params."KEY"`, and not a failed trial later; given `check` (the command passes `tuitrain run`'s
preflight), each of those configs is also checked as `tuitrain run` checks it, its targets' signatures
included: a key the optimizer does not take (`"optimizer.lrr"`) is exit 2 before any trial, with "did you
mean". Must not import torch, textual or optuna (`check` may).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from tuitrain.config import ConfigError
from tuitrain.config.schema import suggest
from tuitrain.config.toml_writer import value_text
from tuitrain.sources.sweep_files import PARAM_KEYS, BadParam, Param, read_param

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp")
PRUNERS = ("median", "hyperband", "none")
KEYS = ("name", "metric", "mode", "trials", "parallel", "sampler", "pruner", "prune_after", "storage", "seed", "params")
#: how a target's signature check (config/targets.py check_kwargs) refuses an argument's name
KEY_REFUSED = ("unexpected keyword argument", "is passed by tuitrain", "is a positional-only argument")
#: what a sampler needs besides optuna (its own dependency), and how to get it
SAMPLER_NEEDS = {"cmaes": ("cmaes", "pip install cmaes"), "gp": ("scipy", "pip install scipy")}


@dataclass
class SweepSpec:
    name: str
    metric: str
    mode: str
    trials: int
    parallel: int
    sampler: str
    pruner: str
    storage: str
    seed: int | None
    params: dict[str, Param]
    prune_after: float = 0  # epochs a trial runs before the pruner may stop it

    @property
    def direction(self) -> str:
        return "minimize" if self.mode == "min" else "maximize"


def toml_value(value: Any) -> str:
    """`value` as `--set KEY=VALUE` takes it (a TOML value)."""
    return value_text(value)


def set_item(key: str, value: Any) -> str:
    return f"{key}={toml_value(value)}"


def read_spec(cfg, source: str, overrides=(), check: Callable[[Any], None] | None = None) -> SweepSpec:
    """The checked [sweep] table of `cfg` (a Config loaded from `source` with `overrides`);
    ConfigError naming the key otherwise. `check(config)` raises ConfigError for a config that
    `tuitrain run` would refuse: `cfg` itself is checked with it (its error is the config's own), then
    the config with each value to check of each parameter (its error names the parameter)."""
    from tuitrain.config.loading import config_from_dict

    table = cfg.sweep
    if table is None:
        raise ConfigError(
            "no [sweep] table: add one with the parameters to search (see the README's Sweeps)", file=source
        )

    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(why, file=source, key=f"sweep.{key}" if key else "sweep")

    for key in table:
        if key not in KEYS:
            raise fail(key, "unknown key" + suggest(key, KEYS))

    def get(key: str, kind: type | tuple, default: Any) -> Any:
        value = table.get(key, default)
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise fail(key, f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
        return value

    name = get("name", str, "") or cfg.experiment.name
    if not name or "/" in name or name in (".", ".."):
        raise fail("name", f"{name!r} is not a folder name")
    metric = get("metric", str, "") or cfg.checkpoint.monitor
    mode = get("mode", str, "") or cfg.checkpoint.mode
    if mode not in ("min", "max"):
        raise fail("mode", f"expected 'min' or 'max', got {mode!r}")
    split, _, metric_name = metric.partition("/")
    logged = {"train": cfg.metrics.train, "valid": cfg.metrics.valid}.get(split)
    if logged is None or not metric_name:
        raise fail("metric", f"expected 'valid/NAME' or 'train/NAME', got {metric!r}")
    names = [m if isinstance(m, str) else str(m.get("name", m.get("target", ""))) for m in logged]
    if metric_name not in names:
        raise fail("metric", f"{metric!r} is not a metric this config logs ({split}: {', '.join(names) or 'none'})")
    trials = get("trials", int, 20)
    if trials < 1:
        raise fail("trials", f"must be at least 1, got {trials}")
    parallel = get("parallel", int, 1)
    if parallel < 1:
        raise fail("parallel", f"must be at least 1, got {parallel}")
    sampler = get("sampler", str, "tpe")
    if sampler not in SAMPLERS:
        raise fail(
            "sampler", f"unknown sampler {sampler!r}" + suggest(sampler, SAMPLERS) + f" (one of {', '.join(SAMPLERS)})"
        )
    if sampler in SAMPLER_NEEDS and importlib.util.find_spec(SAMPLER_NEEDS[sampler][0]) is None:
        raise fail("sampler", f"the {sampler!r} sampler needs {SAMPLER_NEEDS[sampler][0]}: {SAMPLER_NEEDS[sampler][1]}")
    pruner = get("pruner", str, "median")
    if pruner not in PRUNERS:
        raise fail(
            "pruner", f"unknown pruner {pruner!r}" + suggest(pruner, PRUNERS) + f" (one of {', '.join(PRUNERS)})"
        )
    prune_after = get("prune_after", (int, float), 0)
    if not math.isfinite(prune_after) or prune_after < 0:
        raise fail(
            "prune_after",
            f"expected the epochs a trial runs before the pruner may stop it (0 or more), got {prune_after!r}",
        )
    storage = get("storage", str, "")
    seed = table.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise fail("seed", f"expected an integer, got {seed!r}")
    if seed is not None and not 0 <= seed < 2**32:  # what Optuna's samplers take (numpy's generator)
        raise fail("seed", f"expected an integer from 0 to 4294967295, got {seed}")
    raw = table.get("params")
    if not isinstance(raw, dict) or not raw:
        raise fail(
            "params",
            "expected a table of the config keys to search, such as "
            '"optimizer.lr" = { low = 1e-4, high = 1e-1, log = true }',
        )
    params = {key: _param(key, spec, fail) for key, spec in raw.items()}
    if sampler == "grid":
        for p in params.values():
            if not p.choices and p.step is None:
                raise fail(f'params."{p.key}"', "the grid sampler needs choices or a step for every parameter")
    if check is not None:  # the config every trial starts from, as `tuitrain run` checks it
        check(cfg)
    # every value as --set would apply it: a bad key or a value the config refuses is caught now
    base = _as_dict(cfg)
    for p in params.values():
        for value in p.values_to_check():
            try:
                built = config_from_dict(
                    base, source=source, base_dir=cfg.base_dir, overrides=[*overrides, set_item(p.key, value)]
                )
                if check is not None:
                    check(built)
            except ConfigError as e:
                if e.key == p.key and e.message.startswith(KEY_REFUSED):  # whatever its value
                    raise fail(f'params."{p.key}"', e.message) from None
                said = f"{e.key}: {e.message}" if e.key else e.message
                raise fail(f'params."{p.key}"', f"{toml_value(value)} is refused ({said})") from None
    return SweepSpec(name, metric, mode, trials, parallel, sampler, pruner, storage, seed, params, prune_after)


def _as_dict(cfg) -> dict:
    """The config's TOML, as read (what --set applies to)."""
    import tomllib

    if cfg.path is not None:
        d = tomllib.loads(cfg.path.read_text(encoding="utf-8"))
        d.pop("sweep", None)
        return d
    return cfg.to_dict()


def _param(key: str, spec: Any, fail: Callable[[str, str], ConfigError]) -> Param:
    """One key's table as `read_param` reads it; a ConfigError naming the key where it is refused."""
    try:
        return read_param(key, spec)
    except BadParam as e:
        raise fail(e.where, e.why + (suggest(e.unknown, PARAM_KEYS) if e.unknown else "")) from None
