"""A sweep's folder watched (`tuitrain watch SWEEP_DIR`): the compare dashboard over its trials, each one
a run directory `SWEEP_DIR/trial-NNNN/`, which takes in the trials that start after it opened.

`SweepSource` looks for new trial folders (a `trial-NNNN/` with its run.json) every second and reads
each trial's run.json as often (a trial whose process is gone before its final event is "killed").
`SweepState` numbers the trials by their own numbers and gives the run list each trial's searched
values (sweep.json's "params", dotted keys into the trial's config), its status (running, completed,
pruned, interrupted, failed) and its best value of sweep.json's "metric" (min or max by its "mode").

sweep.json and the trial folders are read through `tuitrain.sources.sweep_files` (`tuitrain.run.sweep`
writes them: the dashboard must not import the run layer). Must not import textual.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Literal
from collections.abc import Callable, Iterable

from tuitrain.dashboard.state.changes import Changes, Progress
from tuitrain.dashboard.state.compare import CompareSource, CompareState, flatten, read_config
from tuitrain.dashboard.fmt import format_value
from tuitrain.sinks.run_status import live_status
from tuitrain.sources.sweep_files import SweepInfo, trial_dirs

#: seconds between looks for new trials
SCAN = 1.0
# the run list's order of statuses in the title bar's count
_STATUSES = ("running", "paused", "completed", "pruned", "interrupted", "failed", "killed")


class TrialChecked:
    """A trial's run.json says something new (`live_status`: running, completed, killed ...)."""

    __slots__ = ("run", "status")
    persistent = True

    def __init__(self, run: str, status: str) -> None:
        self.run, self.status = run, status


class SweepSource(CompareSource):
    """The trials found when it opens (`trials`, `configs`), and every one that starts later."""

    def __init__(self, folder: str | Path, scan: float = SCAN) -> None:
        self.folder = Path(folder)
        self.trials = trial_dirs(self.folder)
        dirs = [p for _, p in self.trials]
        super().__init__(dirs, [p.name for p in dirs], [live_status(p) == "running" for p in dirs])
        self.configs = {p.name: read_config(p) for p in dirs}
        self.run_dir = self.folder
        self.scan = scan
        self._checked: dict[str, str] = {}

    def follow(self) -> None:
        while True:
            self.look()
            if self._closed.wait(self.scan):
                return

    def look(self) -> None:
        """New trials taken in; each trial's run.json read, and said when it changed."""
        for number, path in trial_dirs(self.folder):
            if path.name not in self.readers:
                self.add(path, path.name, read_config(path), number)
        for name, reader in self.readers.items():
            status = live_status(reader.run_dir)
            if status != self._checked.get(name):
                self._checked[name] = status
                self._emit(TrialChecked(name, status), None)


class SweepState(CompareState):
    """The trials compared: numbered by their own numbers, listed by number (the pinned first)."""

    kind = "sweep"
    noun = "trials"

    def __init__(
        self,
        sweep: SweepInfo,
        trials: list[tuple[int, Path]],
        configs: dict[str, dict] | None = None,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> None:
        names = [p.name for _, p in trials]
        super().__init__(names, configs, clock=clock, **kwargs)
        self.sweep = sweep
        self.number = {p.name: n for n, p in trials}
        self.checked: dict[str, str] = {}  # each trial's run.json status
        self._heads = column_heads(sweep.params)
        # the best trial, once found since the last events (False: not yet)
        self._best: str | None | Literal[False] = False

    def apply(self, events: Iterable[Any]) -> Changes:
        self._best = False
        dirty: Changes = set()
        rest: list[Any] = []
        for item in events:
            if isinstance(item, TrialChecked):
                if rest:
                    dirty |= super().apply(rest)
                    rest = []
                if item.run in self.runs and self.checked.get(item.run) != item.status:
                    self.checked[item.run] = item.status
                    dirty.add(Progress)
            else:
                rest.append(item)
        return dirty | (super().apply(rest) if rest else set())

    def listed(self) -> list[str]:
        return self.pinned + sorted((n for n in self.runs if n not in self.pinned), key=lambda n: self.number[n])

    # --- what the run list shows ---------------------------------------------------------------

    def status_of(self, name: str) -> str:
        """running, paused, completed, pruned, interrupted, failed; killed: its process went without its end."""
        rs = self.runs[name]
        if rs.final == "interrupted" and rs.finished is not None and rs.finished.reason == "pruned":
            return "pruned"
        if rs.final:
            return rs.final
        if self.checked.get(name) == "killed":
            return "killed"
        return "paused" if rs.paused else "running"

    def best_value(self, name: str) -> float | None:
        """The trial's best value of the sweep's metric: its validations' (epoch) values, min or max."""
        split, _, metric = self.sweep.metric.partition("/")
        series = self.runs[name].series.get((split, "epoch", metric)) if metric else None
        if series is None or not series.count:
            return None
        return series.min if self.sweep.mode == "min" else series.max

    def best_trial(self) -> str | None:
        """The completed trial with the best value (a pruned one is no candidate, as in Optuna)."""
        if self._best is False:
            self._best = self._find_best()
        return self._best

    def _find_best(self) -> str | None:
        sign = 1 if self.sweep.mode == "min" else -1
        done = [
            (sign * v, self.number[n], n)
            for n in self.runs
            if self.status_of(n) == "completed" and (v := self.best_value(n)) is not None and math.isfinite(v)
        ]
        return min(done)[2] if done else None  # a tie: the first trial

    def monitored(self, name: str) -> tuple[float | None, bool]:
        """(the trial's best value, whether it is the sweep's best trial)."""
        if not self.sweep.metric:
            return super().monitored(name)
        return self.best_value(name), name == self.best_trial()

    def monitor_name(self) -> str:
        return self.sweep.metric or super().monitor_name()

    def value_lower_is_better(self) -> bool:
        return self.sweep.mode == "min" if self.sweep.metric else super().value_lower_is_better()

    def value_columns(self) -> list[str]:
        return list(self._heads)

    def values_of(self, name: str) -> list[str]:
        flat = flatten(self.config_of(name))
        return [_short(flat[key]) if key in flat else "-" for key in self.sweep.params]

    def headline(self) -> str:
        """sweep NAME · max valid/accuracy · 6 trials: 2 running, 4 completed · best ━3 0.6775"""
        sweep = self.sweep
        counts: dict[str, int] = {}
        for name in self.runs:
            status = self.status_of(name)
            counts[status] = counts.get(status, 0) + 1
        order = sorted(counts, key=lambda s: _STATUSES.index(s) if s in _STATUSES else len(_STATUSES))
        n = len(self.runs)
        text = f"sweep {sweep.name}" + (f" · {sweep.mode} {sweep.metric}" if sweep.metric else "")
        text += f" · {n} trial{'s' if n != 1 else ''}" + (
            ": " + ", ".join(f"{counts[s]} {s}" for s in order) if counts else " yet"
        )
        best = self.best_trial() if sweep.metric else None
        if best is not None:
            text += f" · best ━{self.number[best]} {format_value(self.best_value(best))}"
        return text


def _short(value: Any) -> str:
    """A searched value as the run list shows it: floats in 3 significant digits."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def column_heads(keys: Iterable[str]) -> list[str]:
    """The columns' names: each key's last part (`optimizer.lr`: lr), more of it where two would share one."""
    keys = [k.split(".") for k in keys]
    heads = []
    for parts in keys:
        depth = 1
        while depth < len(parts) and any(o != parts and o[-depth:] == parts[-depth:] for o in keys):
            depth += 1
        heads.append(".".join(parts[-depth:]))
    return heads


__all__ = ["SweepSource", "SweepState", "TrialChecked", "column_heads"]
