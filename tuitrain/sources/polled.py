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

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tuitrain.core.events import Event, MetricsLogged
from tuitrain.sources.run_files import Emit, MetricsBlock

LIVE_WITHIN = 60.0  # seconds: a run whose files changed this recently may still be written (a writer flushes)
Item = Event | MetricsBlock  # what a source hands on
_VALID = ("validation", "valid", "eval", "val")  # longest first: "validation_loss" is not "idation_loss"
_SEPARATORS = "/_-"


def split_name(name: str) -> tuple[str, str]:
    """(split, name) of a logged metric's name (see the module's docstring)."""
    lower = name.lower()
    for word, split in [(w, "valid") for w in _VALID] + [("training", "train"), ("train", "train")]:
        if lower.startswith(word) and len(name) > len(word) + 1 and name[len(word)] in _SEPARATORS:
            return split, name[len(word) + 1 :]
    return "train", name


def written_within(paths: Iterable[os.PathLike | str], seconds: float = LIVE_WITHIN) -> bool:
    """Whether any of `paths` was modified in the last `seconds` (a missing one was not)."""
    now = time.time()
    for path in paths:
        try:
            if now - os.stat(path).st_mtime < seconds:
                return True
        except OSError:
            continue
    return False


def simple_yaml(text: str) -> dict:
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


class Columns:
    """Logged values gathered as a reader goes, then handed on as one block: `add(split, scope, name,
    step, value, time)` per value; `block(epoch)` the `ForeignBlock` of them, or None when none came."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str, str], tuple[list[float], list[float]]] = {}
        self.times: dict[float, float] = {}  # a training step -> when it was logged
        self.epochs: dict[float, int] = {}  # a step -> its epoch, where the tool says

    def add(self, split: str, scope: str, name: str, step: float, value: float, time: float | None = None) -> None:
        xs, ys = self.values.setdefault((split, scope, name), ([], []))
        xs.append(step)
        ys.append(value)
        if split == "train" and scope == "step" and time is not None:
            self.times[step] = time

    def __len__(self) -> int:
        return sum(len(xs) for xs, _ in self.values.values())

    def block(self, epoch: int = 0, time: float = 0.0) -> ForeignBlock | None:
        if not self.values:
            return None
        block = ForeignBlock(self.values, self.times, self.epochs, epoch, time)
        self.values, self.times, self.epochs = {}, {}, {}
        return block


class ForeignBlock(MetricsBlock):
    """Another tool's logged values as a `MetricsBlock`: `series` {(split, scope, name): (steps, values)},
    `latest`, the training steps' times (the time axis and the rates); `events()` and `lines` say them
    as MetricsLogged events (an export), made only when asked for."""

    __slots__ = ("_epochs",)

    def __init__(
        self,
        values: dict[tuple[str, str, str], tuple[list[float], list[float]]],
        times: dict[float, float],
        epochs: dict[float, int],
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
        for key, (xs, ys) in values.items():
            steps, got = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
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
        if times:
            steps = np.array(sorted(times), np.float64)
            at = np.array([times[s] for s in steps.tolist()], np.float64)
            ep = np.array([float(epochs.get(s, 0)) for s in steps.tolist()], np.float64)
            zeros = np.zeros(steps.size)
            self.train_steps = (steps, at, ep, zeros, zeros)

    @property
    def lines(self) -> list[bytes]:
        if self._lines is None:
            self._lines = [e.to_json().encode() for e in self.events()]
        return self._lines

    def events(self) -> list[Event]:
        out: list[Event] = []
        times = dict(zip(*self.train_steps[:2])) if self.train_steps is not None else {}
        rows: dict[tuple[str, str, float], dict[str, float]] = {}
        for (split, scope, name), (xs, ys) in self.series.items():
            for x, y in zip(xs.tolist(), ys.tolist()):
                rows.setdefault((split, scope, x), {})[name] = y
        for (split, scope, step), metrics in sorted(rows.items(), key=lambda kv: kv[0][2]):
            out.append(
                MetricsLogged(
                    split=split,
                    epoch=self._epochs.get(step, self.epoch),
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

    def __init__(self, live: bool) -> None:
        self.live = live
        self.problems: list[str] = []
        self.backlog: Callable[[], int] = lambda: 0  # set by the app; unused: a read is bounded by the files
        self.caught_up = False
        self._stop = threading.Event()
        self._emit: Emit | None = None
        self._kinds: dict[str, int] = {}  # a kind of problem -> its line in `problems`

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

    def work(self) -> int | None:
        assert self._emit is not None, "open() first"
        emit = self._emit
        try:
            while not self._stop.is_set():
                try:
                    events = list(self.read())
                except Exception as e:  # a file no reader foresaw: one line, never a traceback
                    self.problem(f"{self.describe()}: could not be read further ({type(e).__name__}: {e})")
                    self.caught_up = True
                    self._stop.wait()
                    break
                for event in events:
                    emit(event, None)  # type: ignore[arg-type]  # a block goes where events go, as FileSource's do
                self.caught_up = True
                self._stop.wait(self.poll_live if self.live else self.poll_done)
        finally:
            self.release()
        return None

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
