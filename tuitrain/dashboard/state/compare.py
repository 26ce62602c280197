"""Several runs compared (`tuitrain watch RUN_DIR RUN_DIR...`, a folder of runs): each run followed by
its own reader (`tuitrain.sources.registry`: a tuitrain run's events.jsonl, or another tool's files, so
one view compares runs of several tools), folded into one `DashboardState` per run; every chart overlays
the runs shown, one colour each, and `d` lists the config keys whose values differ. Nothing is steered.

Which runs are shown is the state's too (the run list's keys change it): a run is shown when it is
pinned, or when it is not hidden and matches the filter (`RunFilter`: name patterns and config
conditions such as `optimizer.lr=1e-3`). Pinned runs are listed first and drawn last (on top).
A run that appears while they are watched (a sweep's new trial) comes as `RunAdded` through the same
bridge (`CompareSource.add`, `CompareState.add_run`), before its events. A run whose process is gone
before its final event (a tuitrain run's run.json, looked at every second) is "killed" (`RunKilled`), once all
it wrote is read.
The first run is the primary one: the output panel shows it. Must not import torch or textual.
"""

from __future__ import annotations

import math
import re
import threading
import time
import tomllib
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable

from tuitrain.core.events import Event, RunStarted
from tuitrain.dashboard.state.changes import Changes, Checkpoints, Plot, Progress, Result
from tuitrain.dashboard.state.model import DashboardState
from tuitrain.sources import registry
from tuitrain.sources.refs import RunRef
from tuitrain.sources.run_files import Emit, Source
from tuitrain.sinks.run_status import KILLED, live_status

# one colour per run, in order (the eleventh run and on take them again; the run's number tells them apart)
RUN_COLORS = [
    (60, 155, 232),
    (240, 160, 48),
    (80, 200, 120),
    (220, 110, 200),
    (230, 220, 90),
    (120, 220, 230),
    (235, 95, 85),
    (165, 135, 245),
    (175, 215, 95),
    (245, 175, 190),
]


def run_color(i: int) -> tuple[int, int, int]:
    return RUN_COLORS[i % len(RUN_COLORS)]


def color_indexes(state: Any, runs: Iterable[str]) -> dict[str, int]:
    """Each run's colour, as `run_color` takes it: its number less one (its place in `runs` where the
    state numbers none; a sweep numbers its trials by their own numbers)."""
    number = getattr(state, "number", None) or {}
    return {run: number.get(run, i + 1) - 1 for i, run in enumerate(runs)}


class Tagged:
    """An event of one of the compared runs, as it travels through the app's bridge."""

    __slots__ = ("event", "run")
    persistent = True

    def __init__(self, event: Event, run: str) -> None:
        self.event, self.run = event, run


def run_names(runs: list[Path]) -> list[str]:
    """How the legend names each run folder: its name, with its parent's when two share one (the registry's
    rule, `registry.names`, for runs of any tool)."""
    return registry.names([registry.own(p) for p in runs])


class RunAdded:
    """A run that appeared while the runs are watched (a sweep's new trial): the state takes it in
    before any of its events, which come after this through the same bridge."""

    __slots__ = ("run", "run_dir", "config", "number")
    persistent = True

    def __init__(self, run: str, run_dir: Path, config: dict, number: int | None = None) -> None:
        self.run, self.run_dir, self.config, self.number = run, run_dir, config, number


class RunKilled:
    """One of the compared runs: run.json says it runs, but its process is gone (`live_status`'s
    "killed"), and every line it wrote has been read: no final event will come."""

    __slots__ = ("run",)
    persistent = True

    def __init__(self, run: str) -> None:
        self.run = run


class CompareSource:
    """One source per run (its reader's, from the registry: a tuitrain run folder given as a path), each on
    its own thread; events reach the app tagged by run. `add` takes one more run while it works (`readers`
    is replaced, never changed in place: the screen's thread reads it)."""

    CHECK = 1.0  # seconds between looks at the runs' run.json (a run killed without its end)

    def __init__(
        self, runs: list[Path] | list[RunRef], names: list[str], live: Iterable[bool | None] | None = None
    ) -> None:
        refs = [r if isinstance(r, RunRef) else registry.own(r) for r in runs]
        lives = list(live) if live is not None else [False] * len(refs)
        # each a Source (with backlog, run_dir, and a file reader's ends_reached)
        self.readers: dict[str, Any] = {
            name: registry.open_source(ref, alive) for name, ref, alive in zip(names, refs, lives)
        }
        # exports go to the first tuitrain run's folder (never into another tool's)
        self.run_dir = next((Path(r.path) for r in refs if registry.is_own(r)), None)
        self._closed = threading.Event()
        self._backlog: Callable[[], int] = lambda: 0
        self._emit: Emit | None = None
        self._threads: list[threading.Thread] = []
        self._working = False

    @property
    def backlog(self) -> Callable[[], int]:
        return self._backlog

    @backlog.setter
    def backlog(self, fn: Callable[[], int]) -> None:
        self._backlog = fn
        for reader in self.readers.values():
            reader.backlog = fn

    def open(self, emit: Emit) -> None:
        self._emit = emit
        for name, reader in self.readers.items():
            self._open(name, reader)

    def _open(self, name: str, reader: Source) -> None:
        emit = self._emit
        reader.open(lambda event, state=None, _run=name: emit(Tagged(event, _run), state))

    def _start(self, name: str, reader: Source) -> None:
        t = threading.Thread(target=reader.work, name=f"tuitrain-compare-{name}", daemon=True)
        self._threads.append(t)
        t.start()

    def add(self, run_dir: Path, name: str, config: dict, number: int | None = None, live: bool = True) -> None:
        """One more run, from the thread that runs `work`: the state told first (`RunAdded`), then its
        events read as the others' are."""
        assert self._emit is not None, "open() first"
        reader = registry.open_source(registry.own(run_dir), live)
        reader.backlog = self._backlog
        self._emit(RunAdded(name, Path(run_dir), config, number), None)
        self._open(name, reader)
        self.readers = {**self.readers, name: reader}
        if self._working:
            self._start(name, reader)

    def work(self) -> int | None:
        self._working = True
        for name, reader in self.readers.items():
            self._start(name, reader)
        self.follow()
        for reader in self.readers.values():
            reader.close()
        for t in self._threads:
            t.join(timeout=2)
        return None

    def follow(self) -> None:
        """Until closed (a source that finds runs while it works looks for them here); every `CHECK`
        seconds, whether a run that has not ended was killed (`RunKilled`)."""
        pending: dict[str, int] = {}  # killed runs -> the reader's ends reached when that was seen
        done: set[str] = set()  # runs ended (or said killed): no need to look again
        while not self._closed.wait(self.CHECK):
            for name, reader in self.readers.items():
                if name in done:
                    continue
                if not isinstance(getattr(reader, "run_dir", None), Path):  # another tool's: no run.json
                    done.add(name)
                    continue
                if name in pending:
                    if reader.ends_reached > pending[name]:  # read to the end since it died: all of it
                        done.add(name)
                        self._emit(RunKilled(name), None)
                    continue
                status = live_status(reader.run_dir)
                if status == KILLED:
                    pending[name] = reader.ends_reached
                elif status not in ("running", "unknown"):
                    done.add(name)  # ended: its final event says how

    def close(self) -> None:
        self._closed.set()
        for reader in self.readers.values():
            reader.close()


class CompareState(DashboardState):
    """The primary run's state (for the panels), plus every run's own state in `runs` (for the
    charts); the metric names are every run's. `hidden`, `pinned` and `run_filter` say which runs
    the charts, their titles and the legend show (`shown_runs`)."""

    kind = "compare"  # what the views test in place of `hasattr(state, "runs")`
    noun = "runs"  # what the run list's title calls them

    def __init__(
        self,
        names: list[str],
        configs: dict[str, dict] | None = None,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> None:
        super().__init__(clock=clock, **kwargs)
        self._new_run = lambda: DashboardState(clock=clock, **kwargs)
        self.runs: dict[str, DashboardState] = {n: self._new_run() for n in names}
        self.primary = names[0] if names else None  # a sweep may have no trial yet
        self.configs = configs or {}  # each run's config.toml
        self.started_configs: dict[str, dict] = {}  # each run's resolved config, from its RunStarted
        self.number = {n: i + 1 for i, n in enumerate(names)}  # the run's number and colour never change
        self.hidden: set[str] = set()
        self.pinned: list[str] = []  # in the order they were pinned
        self.run_filter = RunFilter("")

    def apply(self, events: Iterable[Any]) -> Changes:
        dirty: Changes = set()
        for item in events:
            if isinstance(item, RunAdded):
                dirty |= self.add_run(item.run, item.config, item.run_dir, item.number)
                continue
            if isinstance(item, RunKilled):
                dirty |= self.killed(item.run)
                continue
            if not isinstance(item, Tagged):
                dirty |= super().apply([item])
                continue
            run = self.runs.get(item.run)
            if run is None:
                continue
            if isinstance(item.event, RunStarted) and isinstance(item.event.config, dict) and item.event.config:
                self.started_configs[item.run] = item.event.config
            changed = run.apply([item.event])
            if item.run == self.primary:
                dirty |= super().apply([item.event])
            if changed & {Progress, Checkpoints, Result}:
                dirty.add(Progress)  # the run list's status and value, the legend's state
            if Plot in changed:
                dirty.add(Plot)
                for name in run.metric_names:
                    if name not in self.metric_names:
                        self.metric_names.insert(0 if name == "loss" else len(self.metric_names), name)
        return dirty

    def add_run(self, name: str, config: dict, files_dir: Path | None = None, number: int | None = None) -> Changes:
        """A run that appeared while watching: listed after the others (numbered after them unless
        `number` says), shown unless the filter leaves it out. Its events follow."""
        if name in self.runs:
            return set()
        rs = self.runs[name] = self._new_run()
        rs.files_dir = Path(files_dir) if files_dir is not None else None
        self.configs[name] = config or {}
        self.number[name] = number if number is not None else max(self.number.values(), default=0) + 1
        if self.primary is None:
            self.primary = name
        return {Progress, Plot}

    def killed(self, name: str) -> Changes:
        """The run's process is gone without its final event: it ended there, "killed" (its time
        stops at its last event); the primary run's panels say so too."""
        rs = self.runs.get(name)
        if rs is None or rs.final:
            return set()
        rs.final = KILLED
        if name == self.primary and not self.final:
            self.final = KILLED
            return {Progress, Result}
        return {Progress}

    # --- which runs are shown ----------------------------------------------------------------

    def config_of(self, name: str) -> dict:
        """The run's config as resolved when it started (config.toml; its RunStarted's without one)."""
        return self.configs.get(name) or self.started_configs.get(name) or {}

    def matches(self, name: str) -> bool:
        return self.run_filter.matches(name, self.config_of(name))

    def is_shown(self, name: str) -> bool:
        return name in self.pinned or (name not in self.hidden and self.matches(name))

    def listed(self) -> list[str]:
        """Every run, as the run list and the legend order them: the pinned first, then by number."""
        return self.pinned + [n for n in self.runs if n not in self.pinned]

    def value_at(self, split: str, name: str, step: float, run: str | None = None) -> tuple[float, float] | None:
        state = self.runs.get(run) if run is not None else None
        return state.value_at(split, name, step) if state is not None else None

    def shown_runs(self) -> list[str]:
        """The runs shown, in the list's order (chart titles, the legend)."""
        return [n for n in self.listed() if self.is_shown(n)]

    def drawn_runs(self) -> list[str]:
        """The runs shown, in the order they are drawn: the pinned last, on top of the others."""
        shown = self.shown_runs()
        pinned = [n for n in shown if n in self.pinned]
        return [n for n in shown if n not in self.pinned] + pinned[::-1]

    def toggle(self, name: str) -> str:
        """Show or hide one run; returns a note when that cannot be done as asked."""
        if name in self.pinned:  # hiding a pinned run unpins it
            self.pinned.remove(name)
            self.hidden.add(name)
            return ""
        if name in self.hidden:
            self.hidden.discard(name)
            if not self.matches(name):
                return "the filter leaves this run out: p pins it, a shows every run"
            return ""
        if not self.matches(name):
            return "the filter leaves this run out: p pins it, a shows every run"
        self.hidden.add(name)
        return ""

    def pin(self, name: str) -> bool:
        """Pin a run (shown whatever the filter, listed first, drawn on top), or unpin it; True: pinned."""
        if name in self.pinned:
            self.pinned.remove(name)
            return False
        self.pinned.append(name)
        self.hidden.discard(name)
        return True

    def only(self, name: str) -> None:
        """This run alone (with the pinned ones): the others hidden, the filter cleared."""
        self.run_filter = RunFilter("")
        self.hidden = {n for n in self.runs if n != name}

    def show_all(self) -> None:
        self.run_filter = RunFilter("")
        self.hidden = set()

    def set_run_filter(self, text: str) -> str:
        """Filter the runs (see `RunFilter`); returns an error message, and then changes nothing."""
        flt = RunFilter(text)
        if flt.error:
            return flt.error
        self.run_filter = flt
        return ""

    # --- what the run list shows ---------------------------------------------------------------

    def status_of(self, name: str) -> str:
        """The run's state in a word: live, paused, completed, interrupted, failed (or killed)."""
        rs = self.runs[name]
        return rs.final or ("paused" if rs.paused else "live")

    def monitored(self, name: str) -> tuple[float | None, bool]:
        """(value, best): the run's best checkpoint's monitored value (best True), else the latest value
        of the metric it monitors (`checkpoint.monitor`; valid/loss, then train/loss when none is set). A run
        that monitors a metric it has not logged yet has no value: never another metric under its heading."""
        rs = self.runs[name]
        best = next((c.get("value") for c in rs.checkpoints if c["file"] == rs.best_file), None)
        if best is None and rs.finished is not None and isinstance(rs.finished.best, dict):
            best = rs.finished.best.get("value")
        if _is_number(best):
            return float(best), True
        for key in [rs.monitor] if rs.monitor else ["valid/loss", "train/loss"]:
            split, _, metric = key.partition("/")
            series = rs.metric_series(metric, split) if metric else None
            if series is not None and series.last is not None:
                return float(series.last[1]), False
            if _is_number(rs.latest.get(key)):
                return float(rs.latest[key]), False
        return None, False

    def value_lower_is_better(self) -> bool:
        """The run list's value column sorts lowest first (the runs' `checkpoint.mode`, else the name's sense)."""
        first = next(iter(self.runs.values()), None)
        return first.lower_is_better(self.monitor_name().partition("/")[2] or "loss") if first else True

    def value_columns(self) -> list[str]:
        """The run list's columns of values in place of the name (a sweep's searched keys); none here."""
        return []

    def values_of(self, name: str) -> list[str]:
        """The run's text in each of `value_columns`."""
        return []

    def headline(self) -> str:
        """The title bar's words in place of the legend ("": the legend)."""
        return ""

    def monitor_name(self) -> str:
        """What the run list's value column holds: the runs' `checkpoint.monitor` when they agree."""
        monitors = {rs.monitor for rs in self.runs.values() if rs.monitor}
        return monitors.pop() if len(monitors) == 1 else "monitored"

    def differences(self, names: list[str] | None = None) -> list[tuple[str, list[str]]]:
        """(dotted key, each run's value as text) for every config key whose values differ between
        `names` (default: every run)."""
        names = list(self.runs) if names is None else names
        flat = {name: flatten(self.config_of(name)) for name in names}  # other tools: their started config
        keys = sorted({k for f in flat.values() for k in f})
        out = []
        for key in keys:
            values = [flat[name].get(key, _MISSING) for name in names]
            if any(v != values[0] for v in values[1:]):
                out.append((key, ["-" if v is _MISSING else _show(v) for v in values]))
        return out


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class RunFilter:
    """Which runs a filter text keeps: terms separated by spaces, all of them must hold.

    A term `KEY=VALUE` (also `!=`, `<`, `<=`, `>`, `>=`) is a condition on the run's config: KEY is a
    dotted key (`optimizer.lr`) or its last parts (`lr`), VALUE a TOML value (a bare word is a
    string) compared as TOML values are: numbers by value (`1e-3` is `0.001`, `1` is `1.0`). Any
    other term is a regular expression searched in the run's name, case-insensitive (a term that is
    not a valid expression: the text itself). Empty: every run."""

    _CONDITION = re.compile(r"^([A-Za-z_][\w.-]*?)\s*(==|!=|<=|>=|=|<|>)(.*)$")

    def __init__(self, text: str) -> None:
        self.text = text.strip()
        self.error = ""
        self.names: list[re.Pattern] = []
        self.conditions: list[tuple[str, str, Any]] = []
        for term in _terms(self.text):
            m = self._CONDITION.match(term)
            if m:
                key, op, raw = m.groups()
                if not raw.strip():
                    self.error = f"{term}: a value is missing after {op}"
                    return
                self.conditions.append((key, "=" if op == "==" else op, _toml_value(raw.strip())))
                continue
            try:
                self.names.append(re.compile(term, re.IGNORECASE))
            except re.error:
                self.names.append(re.compile(re.escape(term), re.IGNORECASE))

    def __bool__(self) -> bool:
        return bool(self.names or self.conditions)

    def matches(self, name: str, config: dict) -> bool:
        if not all(p.search(name) for p in self.names):
            return False
        flat = flatten(config) if self.conditions else {}
        # a run without the key matches no condition on it; `name=AdamW`: any key ending in .name
        return all(any(_holds(v, op, value) for v in _lookup(flat, key)) for key, op, value in self.conditions)


def _terms(text: str) -> list[str]:
    """Split on spaces outside quotes and brackets: `a.b="x y" c=[1, 2]` is two terms."""
    terms, cur, depth, quote = [], "", 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch.isspace() and not depth:
            if cur:
                terms.append(cur)
            cur = ""
            continue
        cur += ch
    if cur:
        terms.append(cur)
    return terms


def _toml_value(raw: str) -> Any:
    """A filter's value as TOML reads it (`1e-3`, `true`, `"AdamW"`, `[1, 2]`); a bare word: the word."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        return raw


def _lookup(flat: dict[str, Any], key: str) -> list[Any]:
    """The values at a dotted key, else at every key ending in `.key` (`lr`: `optimizer.lr`)."""
    if key in flat:
        return [flat[key]]
    return [v for k, v in flat.items() if k.endswith("." + key)]


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _same(a: Any, b: Any) -> bool:
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return x == y or math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return str(a) == str(b) if isinstance(b, str) else a == b


def _holds(value: Any, op: str, wanted: Any) -> bool:
    if op == "=":
        return _same(value, wanted)
    if op == "!=":
        return not _same(value, wanted)
    x, y = _number(value), _number(wanted)
    if x is None or y is None:
        return False
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


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
