"""What every reader of a run's files shares: `RunRef`, one run found under a path, and the contract a
reader module of another tool's logs keeps (docs/architecture.md, "Adding a source").

A reader module (`tuitrain/sources/tensorboard.py`, `lightning_csv.py`, `mlflow.py`, `trackio.py`,
`wandb.py`, and tuitrain's own run directories) has:

- `TOOL`: its name as the run list and `tuitrain ls` show it ("tensorboard");
- `EXTRA`: the pip extra it needs (`pip install tuitrain[EXTRA]`), or None;
- `find_runs(path) -> list[RunRef]`: the runs of this tool that `path` is or holds (nested folders too),
  from names and stats only, cheap enough for a folder of a thousand runs; `[]` when it holds none;
- `open_source(ref, live=None) -> Source`: the run's events for the dashboard (the `Source` protocol of
  run_files.py: `open(emit)`, `work()`, `close()`, `live`), said as tuitrain's own events (`RunStarted`
  with the run's config, `MetricsLogged` or `MetricsBlock`s, `MediaLogged`, `HistogramLogged`); `live`
  None means "decide from the files";
- `is_live(ref) -> bool`: whether its writer is still writing;
- `summary(ref) -> Summary` (optional): what `tuitrain ls` shows of the run, read cheaply (a record's
  start, the tool's own word on the run's end, the last step by seeking from a file's end or one query),
  never every value: a field the log cannot give cheaply is None (registry.summary).

A source also has `problems: list[str]`: what it skipped as damaged, one line each, naming the file and
where ("events.out.tfevents.1.host: a torn last record at byte 10,240 skipped"); the dashboard says them.
Readers of other tools' files never write into those files' folders. Never imports textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict


@dataclass(frozen=True)
class RunRef:
    """One run found under a path: the tool that wrote it, where it is, its name on the screen."""

    tool: str  # a reader module's TOOL: "tuitrain", "tensorboard", "lightning", "mlflow", "trackio", "wandb"
    path: Path  # the run's folder, or the file that holds it (a database: then `key` names the run in it)
    name: str  # shown in the run list and `ls`: the run's path under the folder asked for, or its own name
    key: str = ""  # the run's id inside `path` where one file holds many (an MLflow run id, a trackio run)
    info: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # what find_runs learnt on the way


class Summary(TypedDict, total=False):
    """A run as `tuitrain ls` lists it (a reader's `summary`): each field None where the log does not say
    it cheaply."""

    started: float | None  # seconds since the epoch: the run's recorded start
    status: str | None  # the tool's own word on the run's end ("completed", "failed", "interrupted"); None: none
    epoch: int | None  # as the dashboard counts it (from 1)
    step: int | None  # the last step logged
