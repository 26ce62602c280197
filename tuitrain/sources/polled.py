"""What the readers of other tools' logs share (lightning_csv.py, mlflow.py, trackio.py, wandb.py):
`PolledSource`, a source that reads what a run's files gained every fraction of a second until closed;
`ForeignBlock`, logged values handed on as one `MetricsBlock` (columns, folded with numpy), not one
event each; `split_name`, a metric's name as our train/valid splits see it. Never imports textual.

The splits: a name that begins with a validation word ("val", "valid", "validation", "eval", then "/",
"_" or "-") is a valid metric under the rest of its name ("val/loss", "val_loss" -> valid "loss"); one
that begins with "train" (then "/", "_" or "-") is a train metric under the rest ("train_loss" -> train
"loss"), so that the two overlay on one chart as our own runs' do; any other name is a train metric
under its whole name ("test/acc", "lr"): the charts show the train and valid splits only.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tuitrain.core.events import Event, MetricsLogged, RunFailed, RunFinished
from tuitrain.sources.run_files import Emit, MetricsBlock

LIVE_WITHIN = 60.0  # seconds: a run whose files changed this recently may still be written (a writer flushes)
Item = Event | MetricsBlock  # what a source hands on
_VALID = ("validation", "valid", "eval", "val")  # longest first: "validation_loss" is not "idation_loss"
_SEPARATORS = "/_-"


@functools.lru_cache(maxsize=1 << 16)
def split_name(name: str) -> tuple[str, str]:
    """(split, name) of a logged metric's name (see the module's docstring)."""
    lower = name.lower()
    for word, split in [(w, "valid") for w in _VALID] + [("training", "train"), ("train", "train")]:
        if lower.startswith(word) and len(name) > len(word) + 1 and name[len(word)] in _SEPARATORS:
            return split, name[len(word) + 1 :]
    return "train", name


def scope_suffix(name: str) -> tuple[str, str]:
    """(name without it, "step" or "epoch") of a name ending in Lightning's `_step` or `_epoch` (the two forms
    of one `self.log(on_step=True, on_epoch=True)`: "train_loss_epoch" -> ("train_loss", "epoch")); (name, "")
    for any other. The Lightning CSV and TensorBoard readers and the Lightning callback name values so."""
    for suffix in ("_step", "_epoch"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix[1:]
    return name, ""


def written_within(paths: Iterable[os.PathLike[str] | str], seconds: float = LIVE_WITHIN) -> bool:
    """Whether any of `paths` was modified in the last `seconds` (a missing one was not)."""
    now = time.time()
    for path in paths:
        try:
            if now - os.stat(path).st_mtime < seconds:
                return True
        except OSError:
            continue
    return False


def simple_yaml(text: str) -> dict[str, Any]:
    """The top level's `key: value` lines of a YAML file (hparams.yaml without PyYAML, MLflow's
    meta.yaml), values as numbers where they are, quotes taken off."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line[0] in " \t#-" or ":" not in line:
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        if not value:
            continue
        for kind in (int, float):
            try:
                out[key.strip()] = kind(value)
                break
            except ValueError:
                continue
        else:
            out[key.strip()] = {"true": True, "false": False, "null": None}.get(value, unquote(value))
    return out


def unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def as_number(text: str) -> Any:
    """A parameter logged as text ("0.1", "32") as the number it says, else the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def number(value: Any) -> float | None:
    """A logged value as a float, or None (not a number: a string, a dict, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError):
        return None


Key = tuple[str, str, str]  # (split, scope, name)


class Columns:
    """Logged values gathered as a reader goes, then handed on as one block: `add(split, scope, name,
    step, value, time)` per value, `extend(...)` with arrays of many; `block(epoch)` the `ForeignBlock`
    of them, or None when none came."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._keys: dict[Key, None] = {}  # the names in the order they came
        self._scalars: dict[Key, tuple[list[float], list[float]]] = {}
        self._chunks: dict[Key, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._times: dict[float, float] = {}  # a training step -> when it was logged
        self._time_chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self._epoch_chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (steps, their epochs), where the tool says

    def add(self, split: str, scope: str, name: str, step: float, value: float, time: float | None = None) -> None:
        key = (split, scope, name)
        got = self._scalars.get(key)
        if got is None:
            got = self._scalars[key] = ([], [])
            self._keys[key] = None
        got[0].append(step)
        got[1].append(value)
        if time is not None and split == "train" and scope == "step":
            self._times[step] = time

    def extend(self, split: str, scope: str, name: str, steps: Any, values: Any, times: Any = None) -> None:
        """Many values of one name at once (arrays, in the order they came)."""
        key = (split, scope, name)
        xs, ys = np.asarray(steps, np.float64), np.asarray(values, np.float64)
        if not xs.size:
            return
        self._keys[key] = None
        self._chunks.setdefault(key, []).append((xs, ys))
        if times is not None and split == "train" and scope == "step":
            self._time_chunks.append((xs, np.asarray(times, np.float64)))

    def epochs(self, steps: Any, epochs: Any) -> None:
        self._epoch_chunks.append((np.asarray(steps, np.float64), np.asarray(epochs, np.float64)))

    def __len__(self) -> int:
        return sum(len(v[0]) for v in self._scalars.values()) + sum(
            len(c[0]) for chunks in self._chunks.values() for c in chunks
        )

    def block(self, epoch: int = 0, time: float = 0.0) -> ForeignBlock | None:
        if not self._keys:
            return None
        series = {}
        for key in self._keys:
            parts = list(self._chunks.get(key, ()))
            if key in self._scalars:
                xs, ys = self._scalars[key]
                parts.append((np.asarray(xs, np.float64), np.asarray(ys, np.float64)))
            if len(parts) == 1:
                series[key] = parts[0]
            else:
                series[key] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        times = list(self._time_chunks)
        if self._times:
            times.append((np.fromiter(self._times, np.float64), np.fromiter(self._times.values(), np.float64)))
        epochs = _joined(self._epoch_chunks)
        block = ForeignBlock(series, _joined(times), epochs, epoch, time)
        self._reset()  # empty again for the next block
        return block


def _joined(chunks: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, values) chunks as one pair in step order, a step once (its first value)."""
    if not chunks:
        return None
    steps = np.concatenate([c[0] for c in chunks])
    values = np.concatenate([c[1] for c in chunks])
    steps, first = np.unique(steps, return_index=True)
    return steps, values[first]


class ForeignBlock(MetricsBlock):
    """Another tool's logged values as a `MetricsBlock`: `series` {(split, scope, name): (steps, values)},
    `latest`, the training steps' times (the time axis and the rates); `events()` and `lines` say them
    as MetricsLogged events (an export), made only when asked for."""

    __slots__ = ("_epochs",)

    def __init__(
        self,
        series: dict[Key, tuple[np.ndarray, np.ndarray]],
        times: tuple[np.ndarray, np.ndarray] | None,
        epochs: tuple[np.ndarray, np.ndarray] | None,
        epoch: int,
        time: float,
    ) -> None:
        self._raw = None
        self._lines = None  # type: ignore[assignment]  # made from the series when asked for (`lines`)
        self._epochs = epochs
        self.samples = []
        self.progress = {}
        self.epoch, self.time = epoch, time
        self.series = {}
        self.latest = {}
        self.max_step = None
        n = 0
        for key, (steps, got) in series.items():
            if steps.size > 1 and (np.diff(steps) < 0).any():  # out of order (a tool's rows by key): by step
                order = np.argsort(steps, kind="stable")
                steps, got = steps[order], got[order]
            self.series[key] = (steps, got)
            self.latest[f"{key[0]}/{key[2]}"] = float(got[-1])
            n += steps.size
            if key[1] == "step" or key[0] == "train":
                top = int(steps.max())
                self.max_step = top if self.max_step is None else max(self.max_step, top)
        self._n = n
        self.train_steps = None
        if times is not None:
            steps, at = times
            ep = np.zeros(steps.size)
            if epochs is not None:
                where = np.clip(np.searchsorted(epochs[0], steps), 0, epochs[0].size - 1)
                ep = np.where(epochs[0][where] == steps, epochs[1][where], 0.0)
            zeros = np.zeros(steps.size)
            self.train_steps = (steps, at, ep, zeros, zeros)

    @property
    def lines(self) -> list[bytes]:
        if self._lines is None:
            self._lines = [e.to_json().encode() for e in self.events()]
        return self._lines

    def events(self) -> list[Event]:
        out: list[Event] = []
        # step -> time and step -> epoch (zip of two named lists: zip(*generator) cost mypy 1.5 s of overloads)
        times: dict[float, float] = {}
        epochs: dict[float, float] = {}
        if self.train_steps is not None:
            times = dict(zip(self.train_steps[0].tolist(), self.train_steps[1].tolist()))
        if self._epochs is not None:
            epochs = dict(zip(self._epochs[0].tolist(), self._epochs[1].tolist()))
        rows: dict[tuple[str, str, float], dict[str, float]] = {}
        for (split, scope, name), (xs, ys) in self.series.items():
            for x, y in zip(xs.tolist(), ys.tolist()):
                rows.setdefault((split, scope, x), {})[name] = y
        for (split, scope, step), metrics in sorted(rows.items(), key=lambda kv: kv[0][2]):
            out.append(
                MetricsLogged(
                    split=split,
                    epoch=int(epochs.get(step, self.epoch)),
                    step=int(step),
                    metrics=metrics,
                    scope=scope,
                    time=times.get(step, self.time),
                )
            )
        return out


class PolledSource:
    """A source (run_files.Source) that reads what its files gained every `poll` seconds until closed:
    `read()` (a reader's own) returns the events since its last call; `problems` are the lines saying
    what was skipped as damaged, each said once. A reader's unforeseen error ends nothing: it becomes
    one problem line and the reading stops there."""

    poll_live = 0.5  # seconds between looks while the run's writer is writing: new values within 2 s
    poll_done = 2.0
    #: whether the tool's log records its run's end (MLflow's status, W&B's exit record): then the reader says
    #: it; a log that does not (Lightning's CSV, trackio) ends where its values do once its writer is gone
    records_its_end = False
    #: seconds between looks, while live, at whether the writer still writes (`still_live`)
    recheck_live = 5.0

    def __init__(self, live: bool) -> None:
        self.live = live
        self.problems: list[str] = []
        self.backlog: Callable[[], int] = lambda: 0  # set by the app; unused: a read is bounded by the files
        self.caught_up = False
        self._stop = threading.Event()
        self._emit: Emit | None = None
        self._kinds: dict[str, int] = {}  # a kind of problem -> its line in `problems`
        self._ended = False  # a RunFinished or RunFailed said (the reader's own, or the log's end below)
        self._last = (0, 0, 0.0)  # (epoch, step, time) of the newest values read

    def problem(self, line: str, kind: str = "") -> None:
        """Say `line` once; a line of a `kind` said before takes its place (a count that grew)."""
        if kind and kind in self._kinds:
            self.problems[self._kinds[kind]] = line
        elif line not in self.problems:  # (a line said once)
            if kind:
                self._kinds[kind] = len(self.problems)
            self.problems.append(line)

    def clear(self, kind: str) -> None:
        """A problem of a `kind` that went away (a database no longer locked)."""
        at = self._kinds.pop(kind, None)
        if at is None:
            return
        del self.problems[at]
        self._kinds = {k: i - (i > at) for k, i in self._kinds.items()}

    def open(self, emit: Emit) -> None:
        self._emit = emit

    def read(self) -> Iterable[Item]:  # pragma: no cover - each reader has its own
        raise NotImplementedError

    def release(self) -> None:
        """Let go of what `read` holds open (a database connection)."""

    def still_live(self) -> bool:
        """Whether the run's writer still writes (a reader whose log does not record its end says how it
        knows); looked at again every `recheck_live` seconds while live, so a run that ends while it is
        watched is said to have ended ("log ended"), not live for good."""
        return True

    def work(self) -> int | None:
        assert self._emit is not None, "open() first"
        emit = self._emit
        recheck = time.monotonic() + self.recheck_live
        try:
            while not self._stop.is_set():
                if self.live and not self.records_its_end and time.monotonic() >= recheck:
                    recheck = time.monotonic() + self.recheck_live
                    self.live = self.still_live()  # gone quiet: this read is the last, then the log's end
                try:
                    events = list(self.read())
                except Exception as e:  # a file no reader foresaw: one line, never a traceback
                    self.problem(f"{self.describe()}: could not be read further ({type(e).__name__}: {e})")
                    self.caught_up = True
                    self._stop.wait()
                    break
                for event in events:
                    self._note(event)
                    emit(event, None)  # type: ignore[arg-type]  # a block goes where events go, as FileSource's do
                if not (self.live or self._ended or self.records_its_end):  # read to its end, the writer gone
                    emit(self.log_end(), None)
                    self._ended = True
                self.caught_up = True
                self._stop.wait(self.poll_live if self.live else self.poll_done)
        finally:
            self.release()
        return None

    def _note(self, event: Any) -> None:
        if isinstance(event, (RunFinished, RunFailed)):
            self._ended = True
        elif isinstance(event, MetricsBlock) and event.max_step is not None:
            epoch, step, at = self._last
            self._last = (max(epoch, event.epoch or 0), max(step, int(event.max_step)), max(at, event.time or 0.0))

    def log_end(self) -> RunFinished:
        """What a log that says nothing of its run's end is read as once its writer is gone: it ends at its
        last values (the dashboard says "log ended", never that training completed: state/foreign.py)."""
        epoch, step, at = self._last
        return RunFinished(
            status="completed",
            exit_code=0,
            epoch=epoch,
            step=step,
            reason="",
            duration=0.0,
            summary={},
            best={},
            time=at,
        )

    def describe(self) -> str:
        return type(self).__name__

    def close(self) -> None:
        self._stop.set()


def drain(source: Any, timeout: float = 30.0) -> list[Event]:
    """Every event a source says on its first read of its files (`tuitrain ls`, an export, tests): its
    `work` runs on a thread until it has caught up, then is closed."""
    got: list[Event] = []
    source.open(lambda event, state=None: got.append(event))
    thread = threading.Thread(target=source.work, name="tuitrain-drain", daemon=True)
    thread.start()
    end = time.monotonic() + timeout
    while not source.caught_up and thread.is_alive() and time.monotonic() < end:
        time.sleep(0.01)
    source.close()
    thread.join(timeout=5)
    return got


__all__ = [
    "LIVE_WITHIN",
    "Columns",
    "ForeignBlock",
    "drain",
    "PolledSource",
    "as_number",
    "number",
    "simple_yaml",
    "split_name",
    "written_within",
]
