"""Several runs compared (`tuitrain watch RUN_DIR RUN_DIR...`): each run's events.jsonl followed by
its own reader, folded into one `DashboardState` per run; every chart overlays the runs, one colour
each, and `d` lists the config keys whose values differ. Nothing is steered.

The first run is the primary one: the progress, devices, checkpoint and output panels show it.
Must not import torch.
"""

from __future__ import annotations

import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterable

from tuitrain.core.events import Event
from tuitrain.dashboard.model import DashboardState
from tuitrain.dashboard.sources import Emit, FileSource

# one colour per run, in order (the fifth run and on take them again)
RUN_COLORS = [(60, 155, 232), (240, 160, 48), (80, 200, 120), (220, 110, 200), (230, 220, 90), (120, 220, 230)]


def run_color(i: int) -> tuple[int, int, int]:
    return RUN_COLORS[i % len(RUN_COLORS)]


class Tagged:
    """An event of one of the compared runs, as it travels through the app's bridge."""

    __slots__ = ("event", "run")
    persistent = True

    def __init__(self, event: Event, run: str) -> None:
        self.event, self.run = event, run


def run_names(runs: list[Path]) -> list[str]:
    """How the legend names each run: its folder's name, with its parent's when two share one."""
    names = [p.name for p in runs]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in runs]


class CompareSource:
    """One `FileSource` per run, each on its own thread; events reach the app tagged by run."""

    def __init__(self, runs: list[Path], names: list[str], live: Iterable[bool] | None = None) -> None:
        lives = list(live) if live is not None else [False] * len(runs)
        self.readers = {name: FileSource(run, live=alive) for name, run, alive in zip(names, runs, lives)}
        self.run_dir = Path(runs[0])  # exports go to the first run's folder
        self._closed = threading.Event()

    @property
    def backlog(self) -> Callable[[], int]:
        return next(iter(self.readers.values())).backlog

    @backlog.setter
    def backlog(self, fn: Callable[[], int]) -> None:
        for reader in self.readers.values():
            reader.backlog = fn

    def open(self, emit: Emit) -> None:
        for name, reader in self.readers.items():
            reader.open(lambda event, state=None, _run=name: emit(Tagged(event, _run), state))

    def work(self) -> int | None:
        threads = [threading.Thread(target=r.work, name=f"tuitrain-compare-{n}", daemon=True)
                   for n, r in self.readers.items()]
        for t in threads:
            t.start()
        self._closed.wait()
        for t in threads:
            t.join(timeout=2)
        return None

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()
        self._closed.set()


class CompareState(DashboardState):
    """The primary run's state (for the panels), plus every run's own state in `runs` (for the
    charts); the metric names are every run's."""

    def __init__(self, names: list[str], configs: dict[str, dict] | None = None,
                 clock: Callable[[], float] = time.time, **kwargs: Any) -> None:
        super().__init__(clock=clock, **kwargs)
        self.runs: dict[str, DashboardState] = {n: DashboardState(clock=clock, **kwargs) for n in names}
        self.primary = names[0]
        self.configs = configs or {}

    def apply(self, events: Iterable[Any]) -> set[str]:
        dirty: set[str] = set()
        for item in events:
            if not isinstance(item, Tagged):
                dirty |= super().apply([item])
                continue
            run = self.runs.get(item.run)
            if run is None:
                continue
            changed = run.apply([item.event])
            if item.run == self.primary:
                dirty |= super().apply([item.event])
            if "plot" in changed:
                dirty.add("plot")
                for name in run.metric_names:
                    if name not in self.metric_names:
                        self.metric_names.insert(0 if name == "loss" else len(self.metric_names), name)
        return dirty

    def differences(self) -> list[tuple[str, list[str]]]:
        """(dotted key, each run's value as text) for every config key whose values differ."""
        flat = {name: flatten(cfg) for name, cfg in self.configs.items()}
        keys = sorted({k for f in flat.values() for k in f})
        out = []
        for key in keys:
            values = [flat.get(name, {}).get(key, _MISSING) for name in self.runs]
            if any(v != values[0] for v in values[1:]):
                out.append((key, ["-" if v is _MISSING else _show(v) for v in values]))
        return out


_MISSING = object()


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    """{"optimizer": {"lr": 0.1}} -> {"optimizer.lr": 0.1}; arrays stay values."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def read_config(run_dir: Path) -> dict:
    """RUN_DIR/config.toml as a dict ({} when missing or unreadable)."""
    try:
        with open(Path(run_dir) / "config.toml", "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, RecursionError, UnicodeDecodeError):
        return {}
