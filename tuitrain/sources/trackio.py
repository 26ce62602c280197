"""trackio's projects, read with the standard library (docs/formats/others.md): one SQLite database a
project (`<project>.db` under `TRACKIO_DIR`, by default ~/.cache/huggingface/trackio; WAL mode), opened
read-only. Its `metrics` table has a row per `trackio.log` call: run_name, step, an ISO timestamp and the
logged dict as JSON (NaN and infinities as the strings "NaN", "Infinity", "-Infinity"; a nested dict's
values under "outer/inner" here; media and tables, dicts with a "_type", left out); `configs` a run's
config as JSON (trackio's own keys, "_Created" and the like, are not the run's config: "_Created" is its
start). A run is a run name of the project; its new rows are those past the last id read.

Live: trackio records no run's end, so a run is live while its newest row is under polled.LIVE_WITHIN
seconds old.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tuitrain.core.events import RunStarted

try:  # a typed JSON decoder: a batch of rows at once (a dependency; without it the json module)
    import msgspec
except ImportError:  # pragma: no cover
    msgspec = None  # type: ignore[assignment]
from tuitrain.sources.polled import LIVE_WITHIN, Columns, Item, PolledSource, split_name
from tuitrain.sources.refs import RunRef, Summary
from tuitrain.sources.sqlite_ro import Database, Unreadable, is_sqlite, say_read, say_unreadable

TOOL = "trackio"
EXTRA = None  # the standard library only
_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_SKIP_DIRS = {"media", "__pycache__", "node_modules", ".git", "wandb", "mlruns"}


def default_dir() -> Path:
    """Where trackio keeps its projects: TRACKIO_DIR, else ~/.cache/huggingface/trackio."""
    return Path(os.environ.get("TRACKIO_DIR") or Path.home() / ".cache" / "huggingface" / "trackio")


def _is_project(path: Path) -> bool:
    if path.suffix != ".db" or path.name.startswith("registry-") or not is_sqlite(path):
        return False
    db = Database(path)
    try:
        tables = db.tables()
    finally:
        db.close()
    return {"metrics", "configs"} <= tables and "runs" not in tables  # (MLflow's has `runs` and `metrics`)


#: the run ids of `metrics`, each found by a seek in trackio's index of (run_id, step) (a skip scan: never
#: its rows, a million of them taking a second)
_RUN_IDS = (
    "WITH RECURSIVE ids(x) AS (SELECT min(run_id) FROM metrics UNION ALL "
    "SELECT (SELECT min(run_id) FROM metrics WHERE run_id > ids.x) FROM ids WHERE ids.x IS NOT NULL) "
    "SELECT x FROM ids WHERE x IS NOT NULL"
)


def _runs(path: Path) -> list[RunRef]:
    """The project's runs, in the order they began: those with a config row by it, then those with rows
    only by their first row."""
    db = Database(path)
    try:
        try:
            ids, _ = db.rows(_RUN_IDS)
            configs, _ = db.rows("SELECT run_name, run_id, -1000000000 + id FROM configs")
        except Unreadable:  # a database from before run ids: each row looked at
            rows, _ = db.rows(
                "SELECT run_name, min(id) FROM (SELECT run_name, id FROM metrics UNION ALL "
                "SELECT run_name, -1000000000 + id FROM configs) GROUP BY run_name ORDER BY min(id)"
            )
        else:
            known = {run_id for _, run_id, _ in configs}
            first: dict[Any, Any] = {name: at for name, _, at in configs}
            for (run_id,) in ids:
                if run_id not in known:
                    got, _ = db.rows(
                        "SELECT run_name, id FROM metrics WHERE run_id = ? ORDER BY step LIMIT 1", (run_id,)
                    )
                    for name, at in got:
                        first[name] = min(at, first.get(name, at))
            rows = sorted(first.items(), key=lambda item: item[1])
    except Unreadable:
        return []
    finally:
        db.close()
    return [RunRef(TOOL, path, f"{path.stem}/{name}", str(name), {"project": path.stem}) for name, _ in rows]


def find_runs(path: Path | str) -> list[RunRef]:
    """The trackio runs `path` is (a project's .db) or holds (its projects' runs, nested folders too)."""
    path = Path(path)
    if path.is_file():
        return _runs(path) if _is_project(path) else []
    if not path.is_dir():
        return []
    found: list[RunRef] = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".db") and _is_project(Path(folder) / name):
                found.extend(_runs(Path(folder) / name))
    return found


def _seconds(stamp: Any) -> float | None:
    """An ISO timestamp as seconds since the epoch (a time without a zone read as UTC, as trackio writes)."""
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def is_live(ref: RunRef) -> bool:
    db = Database(ref.path)
    try:
        rows, _ = db.rows("SELECT timestamp FROM metrics WHERE run_name = ? ORDER BY id DESC LIMIT 1", (ref.key,))
    except Unreadable:
        return False
    finally:
        db.close()
    newest = _seconds(rows[0][0]) if rows else None
    return newest is not None and time.time() - newest < LIVE_WITHIN


def summary(ref: RunRef) -> Summary:
    """What `tuitrain ls` shows of the run: its start (its config's "_Created") and its last step, in two
    queries (the largest step of each of the run's ids, by trackio's index of (run_id, step); a database
    from before run ids: of the run's rows)."""
    db = Database(ref.path)
    try:
        configs, _ = db.rows("SELECT config FROM configs WHERE run_name = ?", (ref.key,))
        tops: list[Any] | None = None
        if configs:
            try:
                tops, _ = db.rows(
                    "SELECT (SELECT max(step) FROM metrics m WHERE m.run_id = c.run_id) FROM configs c "
                    "WHERE c.run_name = ?",
                    (ref.key,),
                )
            except Unreadable:  # no run_id columns (an older trackio's)
                tops = None
        if tops is None:  # (or a run with no config row: its rows, each looked at)
            tops, _ = db.rows("SELECT max(step) FROM metrics WHERE run_name = ?", (ref.key,))
    except Unreadable:
        return {}
    finally:
        db.close()
    started = None
    for (raw,) in configs:
        try:
            got = json.loads(_text(raw))
        except (ValueError, RecursionError):
            continue
        if isinstance(got, dict):
            started = _seconds(got.get("_Created")) or started
    steps = [top for (top,) in tops if isinstance(top, int)]
    return {"started": started, "step": max(steps) if steps else None}


def open_source(ref: RunRef, live: bool | None = None) -> TrackioSource:
    return TrackioSource(ref, is_live(ref) if live is None else live)


def _text(raw: Any) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def flat_numbers(logged: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, float]]:
    """(name, value) of each number in a logged dict: nested dicts' under "outer/inner", media left out."""
    for key, value in logged.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if "_type" not in value:
                yield from flat_numbers(value, name + "/")
        elif isinstance(value, str):
            if value in _NON_FINITE:
                yield name, _NON_FINITE[value]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield name, float(value)


class TrackioSource(PolledSource):
    """Follows one run of a trackio project's database: its rows past the last id read."""

    def __init__(self, ref: RunRef, live: bool) -> None:
        super().__init__(live)
        self.ref = ref
        self.db = Database(ref.path)
        self._id = 0
        self._said_start = False
        self._damaged = 0
        self._first_damaged = 0

    def still_live(self) -> bool:
        return is_live(self.ref)

    def describe(self) -> str:
        return f"{self.ref.path} (run {self.ref.key})"

    def read(self) -> Iterable[Item]:
        out: list[Item] = []
        try:
            if not self._said_start:
                configs, _ = self.db.rows("SELECT config FROM configs WHERE run_name = ?", (self.ref.key,))
                out.append(self._start(configs))
                self._said_start = True
            rows, damage = self.db.rows(
                "SELECT id, step, timestamp, metrics FROM metrics WHERE id > ? AND run_name = ? ORDER BY id",
                (self._id, self.ref.key),
            )
        except Unreadable as e:
            say_unreadable(self, self.ref.path, e)
            return out
        say_read(self, self.ref.path, damage, self.db.immutable, "rows", "its -wal file's newest rows not read")
        cols = Columns()
        if rows:
            self._id = max(self._id, max(r[0] for r in rows))
            self._rows(rows, cols)
        block = cols.block()
        if block is not None:
            out.append(block)
        return out

    def _rows(self, rows: list[Any], cols: Columns) -> None:
        """Metrics rows (id, step, timestamp, JSON) as columns: the JSON decoded at once where it can be,
        each name's values gathered (a Python step per value, no more)."""
        raws = [raw if isinstance(raw, bytes) else str(raw).encode() for _, _, _, raw in rows]
        logged: list[Any] | None = None
        if msgspec is not None:
            try:
                logged = msgspec.json.decode(b"[" + b",".join(raws) + b"]")
            except (msgspec.DecodeError, RecursionError):
                logged = None
        if logged is None or len(logged) != len(rows):
            logged = [self._decoded(raw) for raw in raws]
        gathered: dict[str, tuple[list[float], list[float], list[float]]] = {}
        stamps: dict[Any, float] = {}
        nan = float("nan")
        for (row_id, step, stamp, _), got in zip(rows, logged):
            if not isinstance(got, dict) or not isinstance(step, int) or isinstance(step, bool):
                self._damage(row_id)
                continue
            at = stamps.get(stamp)
            if at is None:
                at = stamps[stamp] = _seconds(stamp) or nan  # a batch of rows shares its time
            for key, value in got.items():
                kind = type(value)
                if kind is float or kind is int:
                    pairs: Iterable[tuple[str, float]] = ((key, float(value)),)
                else:
                    pairs = flat_numbers({key: value})
                for name, number in pairs:
                    xs = gathered.get(name)
                    if xs is None:
                        xs = gathered[name] = ([], [], [])
                    xs[0].append(step)
                    xs[1].append(number)
                    xs[2].append(at)
        for key, (steps, values, times) in gathered.items():
            split, name = split_name(key)
            cols.extend(split, "step", name, steps, values, times)

    @staticmethod
    def _decoded(raw: bytes) -> Any:
        try:
            return json.loads(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return None

    def _damage(self, row_id: int) -> None:
        self._damaged += 1
        self.problem(
            f"{self.ref.path}: {self._damaged} damaged row{'s' if self._damaged > 1 else ''} of run "
            f"{self.ref.key!r} skipped (the first: metrics id {self._first_damaged or row_id})",
            "rows",
        )
        self._first_damaged = self._first_damaged or row_id

    def _start(self, configs: list[Any]) -> RunStarted:
        config: dict[str, Any] = {}
        for (raw,) in configs:
            try:
                got = json.loads(_text(raw))
            except (ValueError, RecursionError):
                self.problem(f"{self.ref.path}: the config of run {self.ref.key!r} is not JSON", "config")
                continue
            if isinstance(got, dict):
                config.update(got)
        started = _seconds(config.get("_Created"))
        env = {"tool": TOOL, "project": self.ref.path.stem}
        env.update({k[1:]: v for k, v in config.items() if k.startswith("_") and v is not None})
        return RunStarted(
            run_dir=str(self.ref.path),
            experiment=self.ref.name,
            epochs=0,
            max_steps=0,
            steps_per_epoch=0,
            batch_size=0,
            config={k: v for k, v in config.items() if not k.startswith("_")},
            env=env,
            time=started or 0.0,
            loop=TOOL,  # the dashboard's word for a run another tool wrote (dashboard/state/foreign.py)
        )

    def release(self) -> None:
        self.db.close()


__all__ = [
    "EXTRA",
    "TOOL",
    "TrackioSource",
    "default_dir",
    "find_runs",
    "flat_numbers",
    "is_live",
    "open_source",
    "summary",
]
