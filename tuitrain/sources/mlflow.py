"""MLflow runs, read with the standard library without starting MLflow (docs/formats/others.md): the file
store (`mlruns/<experiment id>/<run id>/`) and a SQLite store (`mlflow.db`).

File store: `meta.yaml` names the experiment (its folder) and the run (`run_name`, `status`: 1 running,
3 finished, 4 failed, 5 killed; `lifecycle_stage: deleted` for a deleted one, left out), `params/<key>`
holds a parameter's text, `metrics/<key>` a line "timestamp_ms value step" per logged value, a key with
"/" in folders under metrics/ ("train/loss" is metrics/train/loss). SQLite store: the tables `runs`,
`experiments`, `params`, `metrics` (key, value, timestamp, step, is_nan: a NaN is stored as 0 with
is_nan 1), opened read-only; a run's new metrics rows are those past the last rowid read.

A metric logged without a step has step 0 in MLflow: while every value of a key is at step 0, its values
are placed at 0, 1, 2... in the order they came (a chart of one point otherwise). Parameters (text) are
the run's config, as the numbers they say where they do. Live: status RUNNING and a write within
polled.LIVE_WITHIN seconds (a run whose process died stays RUNNING in MLflow).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tuitrain.core.events import Event, RunFinished, RunStarted
from tuitrain.sources.polled import Item, LIVE_WITHIN, Columns, PolledSource, as_number, simple_yaml, split_name
from tuitrain.sources.refs import RunRef, Summary
from tuitrain.sources.peek import last_line
from tuitrain.sources.sqlite_ro import Database, Unreadable, is_sqlite, say_read, say_unreadable

TOOL = "mlflow"
EXTRA = None  # the standard library only
STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}  # the file store's numbers
SQL_TABLES = {"runs", "experiments", "metrics", "params"}
_SKIP_DIRS = {".trash", "artifacts", "__pycache__", "node_modules", ".git", "checkpoints", "wandb"}


def _meta(path: Path) -> dict[str, Any]:
    try:
        return simple_yaml(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def _status(value: Any) -> str:
    return STATUS.get(value, "") if isinstance(value, int) else str(value or "")


def _is_sql_store(path: Path) -> bool:
    return is_sqlite(path) and SQL_TABLES <= Database(path).tables()


def find_runs(path: Path | str) -> list[RunRef]:
    """The MLflow runs `path` is or holds: run folders of a file store (by their meta.yaml) and the runs
    of SQLite stores (a .db file with MLflow's tables); deleted runs left out."""
    path = Path(path)
    found: list[RunRef] = []
    if path.is_file():
        if path.name == "meta.yaml":
            path = path.parent
        elif _is_sql_store(path):
            return _unique(_sql_runs(path, path.name))
        else:
            return []
    if not path.is_dir():
        return []
    experiments: dict[Path, str] = {}
    for folder, dirs, files in os.walk(path):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        if "meta.yaml" in files:
            meta = _meta(here / "meta.yaml")
            if "run_id" in meta or "run_uuid" in meta:
                dirs[:] = []
                if meta.get("lifecycle_stage") == "deleted":
                    continue
                parent = here.parent
                if parent not in experiments:
                    exp = _meta(parent / "meta.yaml")
                    experiments[parent] = (
                        str(exp.get("name", parent.name)) if exp.get("lifecycle_stage") != "deleted" else ""
                    )
                if not experiments[parent]:
                    continue
                run_name = meta.get("run_name") or _read_text(here / "tags" / "mlflow.runName") or here.name[:8]
                info = {"status": _status(meta.get("status")), "experiment": experiments[parent]}
                found.append(RunRef(TOOL, here, f"{experiments[parent]}/{run_name}", "", info))
                continue
        for name in files:
            if name.endswith(".db") and _is_sql_store(here / name):
                found.extend(_sql_runs(here / name, (here / name).relative_to(path).as_posix()))
    return _unique(found)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _sql_runs(db_path: Path, label: str) -> list[RunRef]:
    db = Database(db_path)
    try:
        rows, _ = db.rows(
            "SELECT r.run_uuid, r.name, r.status, e.name FROM runs r LEFT JOIN experiments e "
            "ON r.experiment_id = e.experiment_id WHERE r.lifecycle_stage IS NOT 'deleted' "
            "AND (e.lifecycle_stage IS NULL OR e.lifecycle_stage IS NOT 'deleted') ORDER BY r.start_time"
        )
    except Unreadable:
        return []
    finally:
        db.close()
    return [
        RunRef(TOOL, db_path, f"{exp or '?'}/{name or run_id[:8]}", str(run_id), {"status": status, "store": label})
        for run_id, name, status, exp in rows
    ]


def _unique(refs: list[RunRef]) -> list[RunRef]:
    """Two runs of one name (MLflow allows it) told apart by their ids."""
    count: dict[str, int] = {}
    for r in refs:
        count[r.name] = count.get(r.name, 0) + 1
    out = []
    for r in refs:
        if count[r.name] > 1:
            run_id = r.key or r.path.name
            r = RunRef(r.tool, r.path, f"{r.name} ({run_id[:8]})", r.key, r.info)
        out.append(r)
    return out


def is_live(ref: RunRef) -> bool:
    now = time.time()
    if ref.key:  # a SQLite store
        db = Database(ref.path)
        try:
            rows, _ = db.rows(
                "SELECT r.status, r.start_time, (SELECT max(timestamp) FROM latest_metrics m "
                "WHERE m.run_uuid = r.run_uuid) FROM runs r WHERE r.run_uuid = ?",
                (ref.key,),
            )
        except Unreadable:
            return False
        finally:
            db.close()
        if not rows or rows[0][0] != "RUNNING":
            return False
        newest = max(t for t in rows[0][1:] if isinstance(t, (int, float))) if any(rows[0][1:]) else 0
        return now - newest / 1000 < LIVE_WITHIN
    if _status(_meta(ref.path / "meta.yaml").get("status")) != "RUNNING":
        return False
    for folder, _, files in os.walk(ref.path):
        for name in files:
            try:
                if now - os.stat(os.path.join(folder, name)).st_mtime < LIVE_WITHIN:
                    return True
            except OSError:
                continue
    return False


#: MLflow's final statuses as the dashboard says them (_Run._end)
ENDED = {"FINISHED": "completed", "FAILED": "failed", "KILLED": "interrupted"}


def summary(ref: RunRef) -> Summary:
    """The run's start and end as MLflow records them (meta.yaml, the `runs` table) and its last step: the
    largest of each metrics file's last line (read from its end), or one query of `latest_metrics`."""
    if ref.key:
        db = Database(ref.path)
        try:
            runs, _ = db.rows("SELECT status, start_time FROM runs WHERE run_uuid = ?", (ref.key,))
            top, _ = db.rows("SELECT max(step) FROM latest_metrics WHERE run_uuid = ?", (ref.key,))
        except Unreadable:
            return {}
        finally:
            db.close()
        status, start = runs[0] if runs else (None, None)
        step = top[0][0] if top else None
    else:
        meta = _meta(ref.path / "meta.yaml")
        status, start, step = _status(meta.get("status")), meta.get("start_time"), None
        for folder, _, files in os.walk(ref.path / "metrics"):
            for name in files:
                parts = last_line(os.path.join(folder, name)).split()
                if len(parts) == 3 and parts[2].lstrip(b"-").isdigit():
                    step = max(step if step is not None else -1, int(parts[2]))
    return {
        "started": start / 1000 if isinstance(start, (int, float)) and start else None,
        "status": ENDED.get(str(status)),
        "step": step if isinstance(step, int) else None,
    }


def open_source(ref: RunRef, live: bool | None = None) -> PolledSource:
    live = is_live(ref) if live is None else live
    return MlflowSqlSource(ref, live) if ref.key else MlflowFileSource(ref, live)


class _Steps:
    """A key's steps as MLflow logged them, a key logged with no step placed at 0, 1, 2... (module doc)."""

    def __init__(self) -> None:
        self._count: dict[str, int] = {}  # a key -> its values so far, while all were at step 0; -1 after

    def __call__(self, key: str, step: int) -> int:
        n = self._count.get(key, 0)
        if n < 0:
            return step
        if step != 0:
            self._count[key] = -1
            return step
        self._count[key] = n + 1
        return n

    def many(self, key: str, steps: np.ndarray) -> np.ndarray:
        """`self(key, step)` of each step of an array, in order."""
        n = self._count.get(key, 0)
        if n < 0 or not steps.size:
            return steps
        moved = np.flatnonzero(steps != 0)
        upto = int(moved[0]) if moved.size else steps.size  # the values at step 0 before the first that is not
        out = steps.copy()
        out[:upto] = np.arange(n, n + upto)
        self._count[key] = -1 if moved.size else n + upto
        return out


class _Run(PolledSource):
    """What both stores' sources share: the run's start said once, its end when its status says it."""

    records_its_end = True  # its status / exit record: said by this reader

    def __init__(self, ref: RunRef, live: bool) -> None:
        super().__init__(live)
        self.ref = ref
        self.steps = _Steps()
        self._ended = False
        self._top = 0  # the highest step read

    def _started(self, config: dict[str, Any], start_ms: Any, env: dict[str, Any]) -> RunStarted:
        return RunStarted(
            run_dir=str(self.ref.path),
            experiment=self.ref.name,
            epochs=0,
            max_steps=0,
            steps_per_epoch=0,
            batch_size=0,
            config=config,
            env={"tool": TOOL, **env},
            time=start_ms / 1000 if isinstance(start_ms, (int, float)) else 0.0,
            loop=TOOL,  # the dashboard's word for a run another tool wrote (dashboard/state/foreign.py)
        )

    def _end(self, status: str, start_ms: Any, end_ms: Any) -> list[Event]:
        """RunFinished or RunFailed once the status is final (FINISHED, KILLED, FAILED)."""
        if self._ended or status not in ENDED:
            return []
        self._ended, self.live = True, False
        ok = isinstance(start_ms, (int, float)) and isinstance(end_ms, (int, float))
        duration = max(0.0, (end_ms - start_ms) / 1000) if ok else 0.0
        at = end_ms / 1000 if isinstance(end_ms, (int, float)) else time.time()
        if status == "FAILED":
            from tuitrain.core.lifecycle import run_failed  # (it imports torch: only for a failed run)

            failed = run_failed("the MLflow run's status is FAILED", step=self._top, duration=duration)
            return [dataclasses.replace(failed, time=at)]
        interrupted = ENDED[status] == "interrupted"
        return [
            RunFinished(
                status=ENDED[status],
                exit_code=1 if interrupted else 0,
                epoch=0,
                step=self._top,
                reason="stopped" if interrupted else "",
                duration=duration,
                summary={},
                best={},
                time=at,
            )
        ]

    def _extend(self, cols: Columns, key: str, steps: np.ndarray, values: np.ndarray, ms: np.ndarray) -> None:
        if not steps.size:
            return
        steps = self.steps.many(key, steps)
        self._top = max(self._top, int(steps.max()))
        split, name = split_name(key)
        cols.extend(split, "step", name, steps, values, ms / 1000)

    def _add(self, cols: Columns, key: str, step: int, value: float, ms: Any) -> None:
        step = self.steps(key, step)
        self._top = max(self._top, step)
        split, name = split_name(key)
        cols.add(split, "step", name, float(step), value, ms / 1000 if isinstance(ms, (int, float)) else None)


class MlflowFileSource(_Run):
    """Follows a file store's run folder: each metrics file read from where it was read to."""

    def __init__(self, ref: RunRef, live: bool) -> None:
        super().__init__(ref, live)
        self.run_dir = Path(ref.path)
        self._offsets: dict[str, int] = {}  # a metric key -> the bytes of its file read
        self._sizes: dict[str, int] = {}  # and the size it had at the last look
        self._damaged = 0
        self._said_start = False

    def describe(self) -> str:
        return str(self.run_dir)

    def read(self) -> Iterable[Item]:
        out: list[Item] = []
        meta = _meta(self.run_dir / "meta.yaml")
        if not self._said_start:
            self._said_start = True
            params = {}
            for name, value in self._files("params"):
                params[name] = as_number(_read_text(value))
            out.append(self._started(params, meta.get("start_time"), {"run_id": self.run_dir.name}))
        cols = Columns()
        for key, path in self._files("metrics"):
            self._read_metric(key, path, cols)
        block = cols.block()
        if block is not None:
            out.append(block)
        out.extend(self._end(_status(meta.get("status")), meta.get("start_time"), meta.get("end_time")))
        return out

    def _files(self, sub: str) -> list[tuple[str, Path]]:
        """(key, path) of the files under the run's `sub` folder, a key's folders joined by "/"."""
        root = self.run_dir / sub
        out = []
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                out.append((path.relative_to(root).as_posix(), path))
        return out

    def _read_metric(self, key: str, path: Path, cols: Columns) -> None:
        at = self._offsets.get(key, 0)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == at:
                    return
                if size < at:  # MLflow only appends: a file made shorter is read again from its start
                    at = 0
                f.seek(at)
                data = f.read()
        except OSError as e:
            self.problem(f"{path}: not readable ({e.strerror})", f"unreadable {key}")
            return
        grown = self._sizes.get(key) != size
        self._sizes[key] = size
        cut = data.rfind(b"\n") + 1
        if cut < len(data) and (not grown or not self.live):
            self.problem(
                f"{path}: a cut last line at byte {at + cut:,} skipped ({len(data) - cut} bytes)", f"cut {key}"
            )
        body = data[:cut]
        self._offsets[key] = at + cut
        tokens = body.split()
        if tokens and len(tokens) == 3 * body.count(b"\n"):  # every line "timestamp value step": at once
            try:
                table = np.array(tokens, dtype=object).reshape(-1, 3)
                ms, values = table[:, 0].astype(np.float64), table[:, 1].astype(np.float64)
                steps = table[:, 2].astype(np.int64).astype(np.float64)
            except (ValueError, TypeError, OverflowError):
                pass  # a damaged line among them: one at a time
            else:
                self._extend(cols, key, steps, values, ms)
                return
        for line in body.split(b"\n"):
            parts = line.split()
            if not parts:
                continue
            try:
                if len(parts) not in (2, 3):
                    raise ValueError(line)
                ms, value = int(parts[0]), float(parts[1])
                step = int(parts[2]) if len(parts) == 3 else 0
            except ValueError:
                self._damaged += 1
                self.problem(
                    f"{self.run_dir / 'metrics'}: {self._damaged} damaged line{'s' if self._damaged > 1 else ''} "
                    f"skipped (the first in {key})",
                    "damaged",
                )
                continue
            self._add(cols, key, step, value, ms)


class MlflowSqlSource(_Run):
    """Follows one run of a SQLite store: its metrics rows past the last rowid read."""

    def __init__(self, ref: RunRef, live: bool) -> None:
        super().__init__(ref, live)
        self.db = Database(ref.path)
        self._rowid = 0
        self._said_start = False
        self._run: tuple[Any, ...] = ()

    def describe(self) -> str:
        return f"{self.ref.path} (run {self.ref.key})"

    def read(self) -> Iterable[Item]:
        out: list[Item] = []
        try:
            runs, _ = self.db.rows(
                "SELECT status, start_time, end_time, run_uuid FROM runs WHERE run_uuid = ?", (self.ref.key,)
            )
            if not self._said_start:
                params, _ = self.db.rows("SELECT key, value FROM params WHERE run_uuid = ?", (self.ref.key,))
                start = runs[0][1] if runs else None
                config = {str(k): as_number(str(v)) for k, v in params}
                out.append(self._started(config, start, {"run_id": self.ref.key}))
                self._said_start = True
            rows, damage = self.db.rows(
                "SELECT rowid, key, value, timestamp, step, is_nan FROM metrics WHERE rowid > ? AND run_uuid = ? "
                "ORDER BY rowid",
                (self._rowid, self.ref.key),
            )
        except Unreadable as e:
            say_unreadable(self, self.ref.path, e)
            return out
        say_read(self, self.ref.path, damage, self.db.immutable, "metrics", "a journal its writer left is not applied")
        cols = Columns()
        if rows:
            self._rows(rows, cols)
        block = cols.block()
        if block is not None:
            out.append(block)
        if runs:
            status, start, end, _ = runs[0]
            out.extend(self._end(str(status), start, end))
        return out

    def _rows(self, rows: list[Any], cols: Columns) -> None:
        """Metrics rows (rowid, key, value, timestamp, step, is_nan) as columns, a key at a time."""
        rowids, keys, values, ms, steps, is_nan = zip(*rows)
        self._rowid = max(self._rowid, max(rowids))
        try:
            got = np.array(values, np.float64)
            at = np.array(ms, np.float64)
            where = np.array(steps, np.float64)
            got[np.array(is_nan, bool)] = np.nan
        except (ValueError, TypeError):  # a value that is not a number: a row at a time
            nan = float("nan")
            for _, key, value, t, step, bad in rows:
                if isinstance(value, (int, float)) and isinstance(step, int):
                    self._add(cols, str(key), step, nan if bad else float(value), t)
            return
        names = np.array(keys, dtype=object)
        for key in dict.fromkeys(keys):
            mine = names == key
            self._extend(cols, str(key), where[mine], got[mine], at[mine])

    def release(self) -> None:
        self.db.close()


__all__ = ["EXTRA", "TOOL", "MlflowFileSource", "MlflowSqlSource", "find_runs", "is_live", "open_source", "summary"]
