"""A sweep's folder, read in one place (`tuitrain sweep` writes it: tuitrain/run/sweep.py).

SWEEP_DIR holds `sweep.json` (`SWEEP_FILE`: what is searched, the metric and its mode, the config file),
and each trial's run directory `trial-NNNN/` (`trial_name`, `trial_dirs`). The config file's `[sweep.params]`
table says how each key is searched: `Param`, read from one key's table by `read_param` (the run layer's
`read_spec` checks a config with it; the parameters view reads the file's table through `searched`).

The dashboard, `tuitrain ls`, `watch`, `serve` and `stop` read a sweep's files through this module and
nothing else. Must not import textual, torch, optuna or the config layer.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SWEEP_FILE = "sweep.json"
TRIAL = re.compile(r"^trial-(\d+)$")
#: the keys a parameter's table may have
PARAM_KEYS = ("low", "high", "log", "step", "choices")


def is_sweep_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a sweep's folder (its sweep.json is there)."""
    return (Path(path) / SWEEP_FILE).is_file()


def is_trial_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a trial's run directory: SWEEP_DIR/trial-NNNN, beside the sweep's sweep.json."""
    p = Path(path)
    return TRIAL.match(p.name) is not None and is_sweep_dir(p.parent)


def trial_name(number: int) -> str:
    """The folder of trial `number` in its sweep's folder: trial-0007."""
    return f"trial-{number:04d}"


@dataclass(frozen=True)
class SweepInfo:
    """sweep.json as its readers need it: what is searched, and which value is best."""

    name: str = ""
    metric: str = ""  # "valid/loss"
    mode: str = "min"
    params: tuple[str, ...] = ()  # the dotted config keys searched
    config: str = ""  # the sweep's config file (its [sweep.params] say how each key is searched)

    def to_json(self, trials: int, storage: str) -> str:
        """sweep.json's text, as `tuitrain sweep` writes it (with the study's size and storage)."""
        info = {
            "name": self.name,
            "config": self.config,
            "metric": self.metric,
            "mode": self.mode,
            "trials": trials,
            "params": list(self.params),
            "storage": storage,
        }
        return json.dumps(info, indent=2) + "\n"


def read_sweep(folder: str | os.PathLike[str]) -> SweepInfo:
    """SWEEP_DIR/sweep.json; what is missing or of the wrong shape takes its default."""
    folder = Path(folder)
    try:
        data = json.loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        data = {}
    data = data if isinstance(data, dict) else {}

    def text(key: str, default: str) -> str:
        value = data.get(key)
        return value if isinstance(value, str) and value else default

    params = data.get("params")
    params = tuple(p for p in params if isinstance(p, str)) if isinstance(params, list) else ()
    mode = text("mode", "min")
    return SweepInfo(
        name=text("name", folder.name.removeprefix("sweep-")),
        metric=text("metric", ""),
        mode=mode if mode in ("min", "max") else "min",
        params=params,
        config=text("config", ""),
    )


def trial_dirs(folder: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(trial number, run directory) of each `trial-NNNN/` that has its run.json, by number."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return []
    found = []
    for p in entries:
        m = TRIAL.match(p.name)
        if m and (p / "run.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


# --- [sweep.params] ------------------------------------------------------------------------------


@dataclass
class Param:
    """One searched config key: a range (`low`..`high`, `log` or `step`) or `choices`."""

    key: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: list[Any] = field(default_factory=list)

    @property
    def is_int(self) -> bool:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in (self.low, self.high)) and (
            self.step is None or isinstance(self.step, int)
        )

    def values_to_check(self) -> list[Any]:
        """The values that must each make a valid config: the ends of a range, every choice."""
        return list(self.choices) if self.choices else [self.low, self.high]

    def suggest(self, trial: Any) -> Any:
        """The trial's value (an optuna Trial)."""
        if self.choices:
            return trial.suggest_categorical(self.key, self.choices)
        assert self.low is not None and self.high is not None  # a range (read_param)
        if self.is_int:
            return trial.suggest_int(self.key, self.low, self.high, step=self.step or 1, log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), step=self.step, log=self.log)

    def grid(self) -> list[Any]:
        """The values a grid search tries."""
        if self.choices:
            return list(self.choices)
        assert self.low is not None and self.high is not None and self.step is not None
        n = int(round((self.high - self.low) / self.step))
        values = [self.low + i * self.step for i in range(n + 1)]
        return [int(v) for v in values] if self.is_int else [round(v, 12) for v in values]


class BadParam(ValueError):
    """A parameter's table refused: `where` (under [sweep]: `params."KEY".log`) and `why`; `unknown`: the
    key not known there, when that is what is wrong (the config layer adds its "did you mean")."""

    def __init__(self, where: str, why: str, unknown: str = "") -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.why, self.unknown = where, why, unknown


def read_param(key: str, spec: Any) -> Param:
    """`[sweep.params]`'s table of one key as a `Param`; `BadParam` when it is not one."""
    where = f'params."{key}"'
    if not isinstance(spec, dict):
        raise BadParam(
            where, f"expected a table such as {{ low = 1, high = 10 }} or {{ choices = [...] }}, got {spec!r}"
        )
    unknown = [k for k in spec if k not in PARAM_KEYS]
    if unknown:
        raise BadParam(f"{where}.{unknown[0]}", "unknown key", unknown=unknown[0])
    if "choices" in spec:
        choices = spec["choices"]
        if set(spec) - {"choices"}:
            raise BadParam(where, "choices and a range (low, high, log, step) do not go together")
        if not isinstance(choices, list) or not choices:
            raise BadParam(f"{where}.choices", f"expected a list of values, got {choices!r}")
        if any(isinstance(c, (dict, list)) for c in choices):
            raise BadParam(f"{where}.choices", "each choice must be a number, a string or a boolean")
        return Param(key, choices=choices)
    if "low" not in spec or "high" not in spec:
        raise BadParam(where, "expected low and high (or choices)")
    low, high, log, step = spec["low"], spec["high"], spec.get("log", False), spec.get("step")

    def number(value: Any, name: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BadParam(f"{where}.{name}", f"expected a number, got {value!r}")

    number(low, "low")
    number(high, "high")
    if not low < high:
        raise BadParam(where, f"low ({low}) must be below high ({high})")
    if not isinstance(log, bool):
        raise BadParam(f"{where}.log", f"expected true or false, got {log!r}")
    if log and low <= 0:
        raise BadParam(f"{where}.low", f"a log range must start above 0, got {low}")
    if step is not None:
        number(step, "step")
        if step <= 0:
            raise BadParam(f"{where}.step", f"must be above 0, got {step}")
        if log:
            raise BadParam(where, "log and step do not go together (Optuna samples one or the other)")
    return Param(key, low=low, high=high, log=log, step=step)


def searched(config_path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The config file's `[sweep.params]`, each key's table as written ({} when the file is gone, damaged or
    has none): how the parameters view lays out each axis (`read_param` says whether a table is sound)."""
    try:
        with open(config_path, "rb") as f:
            table = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, RecursionError, UnicodeDecodeError, TypeError, ValueError):
        return {}
    params = table.get("sweep", {}).get("params") if isinstance(table.get("sweep"), dict) else None
    return {k: v for k, v in params.items() if isinstance(v, dict)} if isinstance(params, dict) else {}


__all__ = [
    "SWEEP_FILE",
    "BadParam",
    "Param",
    "SweepInfo",
    "is_sweep_dir",
    "is_trial_dir",
    "read_param",
    "read_sweep",
    "searched",
    "trial_dirs",
    "trial_name",
]
