"""`MetricFileLogger`: burn-train's per-epoch metric files under the run directory.

Layout and line format (the run directory's contract):

    train/epoch-N/<metric>.log         one line per MetricsLogged(scope="step"): "<step> <value>"
    train/epoch-N/<metric>.epoch.log   the phase's aggregate (MetricsLogged(scope="epoch"))
    valid/epoch-N/<metric>.log         the phase's aggregate of a split that logs no step values

`<metric>` is the name itself when it is a plain file name (letters, digits, `._+=@-`); any other
name (a path, a control character, 300 characters, `Loss` beside `loss`) gets a readable prefix and
a hash of the whole name (`safe_stem`), and `metric_names.json` then maps every name to its file.
`<step>` is the global optimizer step; `<value>` is Python's repr of the float (reads back exactly
with `float()`, including `nan` and `inf`), an int as written, anything else as JSON. A resumed run
appends, so an epoch cut short by a kill may list a step twice: the later line is the resumed one.
Must not import torch or textual.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import IO, Any
from collections.abc import Callable

from tuitrain.core.fsutil import atomic_write_json
from tuitrain.core.events import EpochCompleted, Event, MetricsLogged, PhaseCompleted, RunFailed, RunFinished

_SAFE = re.compile(r"[A-Za-z0-9_+=@-][A-Za-z0-9._+=@-]*")  # a name kept as its own file name
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._+=@-]+")
MAX_NAME = 120  # characters of a name kept as is; a longer one is cut, with its hash (file names: 255 bytes)
NAMES_FILE = "metric_names.json"  # {"metrics": {name: file stem}, "splits": {split: folder}}


def safe_stem(name: str) -> str:
    """A metric (or split) name as one file name without its suffix, never two names on one:
    a name of letters, digits and `._+=@-` (not starting with a dot, not ending in `.epoch`, at
    most MAX_NAME characters) is its own; any other gets a readable prefix and a hash of the whole
    name after a `~`, which no kept name has: `grad/layer.0/norm` -> `grad_layer.0_norm~5d1c0e2a9b3f`."""
    name = str(name)
    if _SAFE.fullmatch(name) and len(name) <= MAX_NAME and not name.endswith(".epoch"):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    prefix = _UNSAFE_RUN.sub("_", name).strip(".")[: MAX_NAME - 20]
    return f"{prefix}~{digest}"


def metric_filename(metric: str, scope: str = "step") -> str:
    """A metric name made safe as one file name: 'loss' -> 'loss.log', 'top-1 acc' -> 'top-1_acc~<hash>.log'."""
    name = safe_stem(metric)
    return f"{name}.epoch.log" if scope == "epoch" else f"{name}.log"


def format_line(step: int, value: Any) -> str:
    if isinstance(value, bool):
        text = str(int(value))
    elif isinstance(value, (int, float)):
        text = repr(value)
    else:
        text = json.dumps(value, default=str)
    return f"{step} {text}\n"


def parse_line(line: str) -> tuple[int, float] | None:
    """A numeric line read back: (step, value); None for anything else."""
    step, _, value = line.strip().partition(" ")
    try:
        return int(step), float(value)
    except ValueError:
        return None


class MetricFileLogger:
    """Appends logged metric values to `<split>/epoch-N/<metric>.log` files of `run_dir`.

    Handles stay open for the current epoch of each split; a split moving to a new epoch closes
    the old epoch's files. Buffered, flushed at least every `flush_interval` seconds and at the
    end of each phase and epoch.
    """

    stores_run = True  # a failed write (a full disk) ends the run: see EventBus.on_write_failure
    step_events = False  # the EventBus spares it StepStarted/StepCompleted: it ignores them
    batch_events = True  # it may get the frequent events in batches (EventBus)

    def __init__(
        self, run_dir: str | os.PathLike[str], flush_interval: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.run_dir = Path(run_dir)
        self.flush_interval = flush_interval
        self._clock = clock
        self._files: dict[tuple[str, int, str], IO[str]] = {}
        self._open: dict[tuple[str, int, str, str], IO[str]] = {}  # (split, epoch, metric, scope) -> file
        self._epoch_of: dict[str, int] = {}  # split -> the epoch whose files are open
        self._stepped: set[str] = {"train"}  # splits with step values: their aggregates go to .epoch.log
        self._last_flush = clock()
        # name -> file stem, for metrics and splits alike; kept across a resume (NAMES_FILE)
        self._stems: dict[str, dict[str, str]] = {"metrics": {}, "splits": {}}
        self._taken: dict[str, set[str]] = {"metrics": set(), "splits": set()}  # stems, case folded
        self._renamed = False  # some name has a file name of its own: NAMES_FILE lists every name
        self._read_names()

    def path(self, split: str, epoch: int, metric: str, scope: str = "step") -> Path:
        name = self._stem("metrics", metric)
        file = f"{name}.epoch.log" if scope == "epoch" else f"{name}.log"
        return self.run_dir / self._stem("splits", split) / f"epoch-{epoch}" / file

    def _stem(self, kind: str, name: str) -> str:
        stem = self._stems[kind].get(name)
        if stem is None:
            stem = safe_stem(name)
            if stem.casefold() in self._taken[kind]:  # 'Loss' after 'loss': one file on macOS
                stem = safe_stem("\0" + name)  # unsafe, so hashed
            self._stems[kind][name] = stem
            self._taken[kind].add(stem.casefold())
            if stem != name or self._renamed:  # a run of plain names has no NAMES_FILE
                self._renamed = True
                atomic_write_json(self.run_dir / NAMES_FILE, self._stems)
        return stem

    def _read_names(self) -> None:
        """A resumed run's names keep the files they had (a damaged file: the names start afresh)."""
        try:
            data = json.loads((self.run_dir / NAMES_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return
        for kind in self._stems:
            table = data.get(kind) if isinstance(data, dict) else None
            for name, stem in table.items() if isinstance(table, dict) else ():
                if (
                    isinstance(stem, str)
                    and stem
                    and stem.casefold() not in self._taken[kind]
                    and (stem == safe_stem(name) or stem == safe_stem("\0" + name))
                ):
                    self._stems[kind][name] = stem
                    self._taken[kind].add(stem.casefold())
                    self._renamed = self._renamed or stem != name

    def __call__(self, event: Event, state: object = None) -> None:
        match event:
            case MetricsLogged(split=split, epoch=epoch, step=step, metrics=metrics, scope=scope):
                if scope == "step":
                    self._stepped.add(split)
                elif split not in self._stepped:
                    scope = "step"  # its only values: they are what <metric>.log holds
                if self._epoch_of.get(split) != epoch:
                    self._close_split(split)
                    self._epoch_of[split] = epoch
                for metric, value in metrics.items():
                    self._file(split, epoch, metric, scope).write(format_line(step, value))
                now = self._clock()
                if now - self._last_flush >= self.flush_interval:
                    self.flush()
            case PhaseCompleted():
                self.flush()
            case EpochCompleted(epoch=epoch):
                for split, open_epoch in list(self._epoch_of.items()):
                    if open_epoch <= epoch:
                        self._close_split(split)
            case RunFinished() | RunFailed():
                self.close()

    def _file(self, split: str, epoch: int, metric: str, scope: str) -> IO[str]:
        f = self._open.get((split, epoch, metric, scope))  # per logged value: no file name work
        if f is not None:
            return f
        path = self.path(split, epoch, metric, scope)
        key = (split, epoch, path.name)
        f = self._files.get(key)
        if f is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            f = self._files[key] = open(path, "a", encoding="utf-8", newline="\n")
        self._open[(split, epoch, metric, scope)] = f
        return f

    def _close_split(self, split: str) -> None:
        for key in [k for k in self._files if k[0] == split]:
            self._files.pop(key).close()
        for key in [k for k in self._open if k[0] == split]:
            del self._open[key]
        self._epoch_of.pop(split, None)

    def flush(self) -> None:
        for f in self._files.values():
            f.flush()
        self._last_flush = self._clock()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        self._open.clear()
        self._epoch_of.clear()
