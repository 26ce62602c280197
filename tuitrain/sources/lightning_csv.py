"""Lightning's CSVLogger runs (`<save_dir>/<name>/version_N/metrics.csv` and `hparams.yaml`), read with
the standard library (docs/formats/others.md).

metrics.csv has one column per metric name ever logged, the sorted union, and a row per `log_metrics`
call: a cell is empty where the row did not log that name, and one step has several rows (a training
row, a validation row, an epoch row at an epoch's last step). `step` is the global step, `epoch` the
epoch from 0 (ours count from 1). A metric logged both per step and per epoch has two columns,
`<name>_step` and `<name>_epoch`: the scope "step" and "epoch" of one name here. Names split as
polled.split_name says: "val_loss" and "train_loss" overlay on the chart "loss"; a validation metric
without a suffix is the epoch's value (scope "epoch"), as Lightning logs validation per epoch.

Live: Lightning appends the rows it holds every `flush_logs_every_n_steps` (100) and rewrites the whole
file when a new name appears (a new header, the same rows before): the reader reads what the file
gained, and on a new header reads it again past the rows it has. The file records no times.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tuitrain.core.events import Event, RunStarted
from tuitrain.sources.polled import Item, Columns, PolledSource, scope_suffix, simple_yaml, split_name, written_within
from tuitrain.sources.peek import first_line, last_line
from tuitrain.sources.refs import RunRef, Summary

TOOL = "lightning"
EXTRA = None  # the standard library's csv; PyYAML for hparams.yaml where installed (a simple reading else)
METRICS = "metrics.csv"
HPARAMS = "hparams.yaml"
_SKIP_DIRS = {"checkpoints", "__pycache__", "node_modules", ".git", "wandb", "mlruns"}


def _is_metrics_csv(path: Path) -> bool:
    """A Lightning metrics.csv: its header names a `step` column (a file being created may be empty)."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    if not head:
        return True
    end = _header_end(head)
    first = head[:end] if end > 0 else head
    try:
        names = next(csv.reader(io.StringIO(first.decode("utf-8", "replace"))), [])
    except csv.Error:
        return False
    return "step" in names


def find_runs(path: Path | str) -> list[RunRef]:
    """The Lightning runs `path` is or holds: each folder with a metrics.csv whose header has `step`."""
    path = Path(path)
    if path.is_file():
        if path.name == METRICS and _is_metrics_csv(path):
            run = path.parent
            return [RunRef(TOOL, run, _own_name(run))]
        return []
    if not path.is_dir():
        return []
    if (path / METRICS).is_file():
        return [RunRef(TOOL, path, _own_name(path))] if _is_metrics_csv(path / METRICS) else []
    found = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        if METRICS in files:
            run = Path(folder)
            if _is_metrics_csv(run / METRICS):
                found.append(RunRef(TOOL, run, run.relative_to(path).as_posix()))
            dirs[:] = []
    return found


def _own_name(run: Path) -> str:
    """A run asked for by its own folder: "lightning_logs/version_3" (the version alone says little)."""
    parent = run.resolve().parent.name
    return f"{parent}/{run.name}" if parent else run.name


def is_live(ref: RunRef) -> bool:
    return written_within([ref.path / METRICS])


def summary(ref: RunRef) -> Summary:
    """What `tuitrain ls` shows of the run: its epoch (from 1, as the dashboard counts) and step from the
    last line of metrics.csv, read from the file's end, their columns from its header. The files record no
    time: its start is the time of the older of metrics.csv and hparams.yaml (a copy's: when copied)."""
    path = Path(ref.path)
    out: Summary = {}
    times = []
    for name in (METRICS, HPARAMS):
        try:
            times.append(os.stat(path / name).st_mtime)
        except OSError:
            continue
    if times:
        out["started"] = min(times)
    try:
        names = next(csv.reader([first_line(path / METRICS).decode("utf-8", "replace")]), [])
        cells = next(csv.reader([last_line(path / METRICS).decode("utf-8", "replace")]), [])
    except csv.Error:
        return out
    if len(cells) != len(names) or cells == names:
        return out
    step, epoch = (_whole(cells[names.index(n)]) if n in names else None for n in ("step", "epoch"))
    out["step"] = step
    out["epoch"] = None if epoch is None else epoch + 1
    return out


def _whole(cell: str) -> int | None:
    try:
        return int(float(cell))
    except (ValueError, OverflowError):
        return None


def open_source(ref: RunRef, live: bool | None = None) -> LightningSource:
    return LightningSource(ref, is_live(ref) if live is None else live)


def read_hparams(path: Path) -> tuple[dict[str, Any], str]:
    """hparams.yaml as a dict, and a problem line ("" when none). PyYAML reads it where installed (the
    Python objects Lightning may write there shown as their tags); else the top level's `key: value`."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}, ""
    except OSError as e:
        return {}, f"{path}: not readable ({e.strerror})"
    try:
        import yaml
    except ImportError:
        return simple_yaml(text), ""
    try:
        got = yaml.load(text, Loader=_loader(yaml))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return simple_yaml(text), f"{path}: not YAML{where}; its simple lines read"
    if got is None:
        return {}, ""
    if not isinstance(got, dict):
        return {"hparams": got}, ""
    return {str(k): v for k, v in got.items()}, ""


_LOADER: Any = None


def _loader(yaml: Any) -> Any:
    """A safe loader that reads a Python object's tag (`!!python/object:argparse.Namespace`) as the
    mapping or value under it instead of refusing the file."""
    global _LOADER
    if _LOADER is None:

        class Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML is optional, imported where used: Any
            pass

        def other(loader: Any, suffix: str, node: Any) -> Any:
            if isinstance(node, yaml.MappingNode):
                return loader.construct_mapping(node, deep=True)
            if isinstance(node, yaml.SequenceNode):
                return loader.construct_sequence(node, deep=True)
            return loader.construct_scalar(node)

        Loader.add_multi_constructor("tag:yaml.org,2002:python/", other)
        Loader.add_multi_constructor("!", other)
        _LOADER = Loader
    return _LOADER


def _header_end(data: bytes) -> int:
    """Where the header record ends (past its newline: a quoted name may hold one), or -1."""
    quoted = False
    for i, byte in enumerate(data):
        if byte == 34:  # '"'
            quoted = not quoted
        elif byte == 10 and not quoted:
            return i + 1
    return -1


class LightningSource(PolledSource):
    """Follows a version folder's metrics.csv (see the module's docstring)."""

    def __init__(self, ref: RunRef, live: bool) -> None:
        super().__init__(live)
        self.ref = ref
        self.csv = Path(ref.path) / METRICS
        self._started = False
        self._header = b""  # the header record's bytes, its newline included
        self._columns: list[tuple[str, str, str] | None] = []  # per column: (split, scope, name), None for step/epoch
        self._step_at = self._epoch_at = -1
        self._offset = 0  # bytes of the file read
        self._rows = 0  # data rows read (a rewritten file is read again past them)
        self._damaged = 0
        self._first_damaged = 0
        self._last_size = -1
        self._epoch = 0

    def still_live(self) -> bool:
        return is_live(self.ref)

    def describe(self) -> str:
        return str(self.csv)

    def _start(self) -> Event:
        config, problem = read_hparams(Path(self.ref.path) / HPARAMS)
        if problem:
            self.problem(problem)
        times = []
        for p in (Path(self.ref.path) / HPARAMS, self.csv):
            try:
                times.append(os.stat(p).st_mtime)
            except OSError:
                pass
        return RunStarted(
            run_dir=str(self.ref.path),
            experiment=self.ref.name,
            epochs=0,
            max_steps=0,
            steps_per_epoch=0,
            batch_size=0,
            config=config,
            env={"tool": TOOL},
            time=min(times) if times else 0.0,
            loop="lightning_csv",  # the dashboard's word for a run another tool wrote (dashboard/state/foreign.py)
        )

    def read(self) -> Iterable[Item]:
        out: list[Item] = []
        if not self._started:
            self._started = True
            out.append(self._start())
        try:
            with open(self.csv, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == self._last_size and size == self._offset:
                    return out
                head = f.read(len(self._header)) if self._header else b""
                if not self._header or head != self._header or size < self._offset:
                    f.seek(0)
                    data, start = f.read(), 0
                else:
                    f.seek(self._offset)
                    data, start = f.read(), self._offset
        except FileNotFoundError:
            if not self.live:
                self.problem(f"{self.csv}: not there", "missing")
            return out
        except OSError as e:
            self.problem(f"{self.csv}: not readable ({e.strerror})", "unreadable")
            return out
        grown = size != self._last_size
        self._last_size = size
        if start == 0:
            end = _header_end(data)
            if end < 0:
                return out  # no whole header yet (a file being written, or rewritten)
            header = data[:end]
            if header != self._header:
                self._set_header(header)
            body, body_at, skip = data[end:], end, self._rows
        else:
            body, body_at, skip = data, start, 0
        cut = body.rfind(b"\n") + 1
        if cut < len(body) and (not grown or not self.live):  # a last line with no newline that stays so
            self.problem(
                f"{self.csv}: a cut last line at byte {body_at + cut:,} skipped ({len(body) - cut} bytes)", "cut"
            )
        if skip:
            lines = body[:cut].count(b"\n")
            if lines < skip:  # rewritten and not yet whole: read it again from its start at the next look
                self._header = b""
                return out
        block = self._parse(body[:cut], skip, body_at)
        self._offset = body_at + cut
        if block is not None:
            out.append(block)
        return out

    def _set_header(self, header: bytes) -> None:
        text = header.decode("utf-8", "replace")
        names = next(csv.reader(io.StringIO(text)), [])
        self._header = header
        self._step_at = names.index("step") if "step" in names else -1
        self._epoch_at = names.index("epoch") if "epoch" in names else -1
        columns: list[tuple[str, str, str] | None] = []
        for i, name in enumerate(names):
            if i in (self._step_at, self._epoch_at):
                columns.append(None)
                continue
            base, scope = scope_suffix(name)
            split, short = split_name(base)
            columns.append((split, scope or ("epoch" if split == "valid" else "step"), short))
        self._columns = columns

    def _parse(self, body: bytes, skip: int, at: int) -> Any:
        """The rows of whole lines `body` past the first `skip` (read before) as one block, a column at a
        time (a Python step per cell, no more: a million rows in seconds)."""
        cols = Columns()
        columns, step_at, epoch_at = self._columns, self._step_at, self._epoch_at
        width = len(columns)
        rows = [row for row in csv.reader(io.StringIO(body.decode("utf-8", "replace"))) if row][skip:]
        first_line = self._rows + 2  # the file's line of rows[0], the header being line 1
        self._rows += len(rows)
        good = [row for row in rows if len(row) == width]
        if len(good) < len(rows):
            for i, row in enumerate(rows):
                if len(row) != width:
                    self._damage(first_line + i)
            lines = np.array([first_line + i for i, row in enumerate(rows) if len(row) == width])
        else:
            lines = np.arange(first_line, first_line + len(rows))
        if not good:
            return None
        table = list(zip(*good))  # the columns
        n = len(good)
        if step_at >= 0:
            steps = self._floats(table[step_at], lines)[0]
        else:
            steps = lines.astype(np.float64) - 2
        keep = ~np.isnan(steps)  # a row without a step (or a damaged one) is skipped whole
        if epoch_at >= 0:
            epochs = self._floats(table[epoch_at], lines)[0]
            known = ~np.isnan(epochs)
            index = np.maximum.accumulate(np.where(known, np.arange(n), -1))  # an empty cell: the epoch before
            epochs = np.where(index >= 0, epochs[np.maximum(index, 0)] + 1, float(self._epoch))
            self._epoch = int(epochs[-1])
            cols.epochs(steps[keep], epochs[keep])
        for j, key in enumerate(columns):
            if key is None:
                continue
            cells = table[j]
            values, there = self._floats(cells, lines)
            there &= keep
            if not there.any():
                continue
            unread = there & np.isnan(values)
            if unread.any():  # "nan" as Lightning writes a NaN stays; a damaged cell (said) goes
                there &= ~unread | np.fromiter((c.strip().lower() == "nan" for c in cells), bool, n)
            cols.extend(key[0], key[1], key[2], steps[there], values[there])
        return cols.block(self._epoch)

    def _floats(self, cells: tuple[str, ...], lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A column's cells as floats (an empty or damaged cell NaN, a damaged one said) and which were
        not empty."""
        arr = np.array(cells, dtype=object)
        present = arr != ""
        arr[~present] = "nan"
        try:
            return arr.astype(np.float64), present
        except (ValueError, TypeError):
            out = np.full(len(cells), float("nan"))
            for i in np.flatnonzero(present).tolist():
                try:
                    out[i] = float(cells[i])
                except ValueError:
                    self._damage(int(lines[i]))
            return out, present

    def _damage(self, line: int) -> None:
        self._damaged += 1
        if self._damaged == 1 or line < self._first_damaged:
            self._first_damaged = line
        self.problem(
            f"{self.csv}: {self._damaged} damaged row{'s' if self._damaged > 1 else ''} skipped "
            f"(the first at line {self._first_damaged})",
            "damaged",
        )


__all__ = ["EXTRA", "TOOL", "LightningSource", "find_runs", "is_live", "open_source", "read_hparams", "summary"]
