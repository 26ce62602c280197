"""`RunStatusWriter`: the run's `run.json`, rewritten atomically, and the readers `tuitrain ls`,
`watch`, `stop` and `checkpoint` use to tell a live run from a finished or killed one.

run.json keys: status ("running", "completed", "interrupted", "failed"), exit_code (null while
running), started / ended / updated (ISO-8601 local time with offset), epoch, epochs, step,
best ({"file", "monitor", "value", "epoch", "step"} or {}), env, experiment, pid, host, resumes,
paused, reason (why it ended: "preempted" after SIGUSR1/SIGUSR2), requeued (a preempted Slurm job was
requeued), error (when failed).
Must not import torch or textual.
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from collections.abc import Callable

from tuitrain.core.events import (
    CheckpointSaved,
    EpochCompleted,
    EpochStarted,
    Event,
    JobRequeued,
    MetricsLogged,
    RunFailed,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
)
from tuitrain.core.fsutil import atomic_write_json, overwrite_in_place

FILENAME = "run.json"
KILLED = "killed"  # live_status of a run whose file says running but whose process is gone


def iso_time(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def read_run(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """run.json as a dict; None when missing, unreadable or not JSON (nested past the stack, too)."""
    try:
        data = json.loads((Path(run_dir) / FILENAME).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return data if isinstance(data, dict) else None


def pid_alive(pid: Any) -> bool | None:
    """True/False for a pid on this host; None when it cannot be told."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None  # os.kill(0, ...) would signal our own process group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return None
    return True


def live_status(run_dir: str | os.PathLike[str]) -> str:
    """run.json's status, with "killed" for a "running" run whose process is gone; "unknown"
    without a readable run.json. A run started on another host is taken at its word."""
    run = read_run(run_dir)
    if run is None:
        return "unknown"
    status = run.get("status")
    if not isinstance(status, str) or not status:
        return "unknown"
    if status == "running" and run.get("host", socket.gethostname()) == socket.gethostname():
        if pid_alive(run.get("pid")) is False:
            return KILLED
    return status


def process_gone(run_dir: str | os.PathLike[str]) -> bool:
    """The run's process (run.json's pid, on this host) no longer exists; False while it does, and when
    that cannot be told (no pid, another host)."""
    run = read_run(run_dir)
    if run is None or run.get("host", socket.gethostname()) != socket.gethostname():
        return False
    return pid_alive(run.get("pid")) is False


def is_live(run_dir: str | os.PathLike[str]) -> bool:
    return live_status(run_dir) == "running"


class RunStatusWriter:
    """Keeps `run_dir/run.json` up to date: at once for run, epoch and checkpoint events, at most
    every `interval` seconds for step progress."""

    stores_run = True  # a failed write (a full disk) ends the run: see EventBus.on_write_failure
    step_events = False  # the EventBus spares it StepStarted/StepCompleted: it ignores them
    batch_events = True  # it may get the frequent events in batches (EventBus)

    def __init__(
        self, run_dir: str | os.PathLike[str], interval: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = Path(run_dir) / FILENAME
        self.interval = interval
        self.clock = clock
        self._last_write: float | None = None
        self._dirty = False
        self._monitor = ""
        self.data: dict[str, Any] = {
            "status": "running",
            "exit_code": None,
            "started": None,
            "ended": None,
            "epoch": 0,
            "epochs": 0,
            "step": 0,
            "best": {},
            "env": {},
            "experiment": "",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "resumes": 0,
            "paused": False,
            "reason": "",
            "requeued": False,
            "error": "",
            "updated": None,
        }

    def write(self) -> None:
        self.data["updated"] = iso_time(time.time())
        try:
            atomic_write_json(self.path, self.data)
        except OSError:
            if self.data["status"] == "running":
                raise
            # the final status on a full disk: over the old file's own blocks, which need no new space
            overwrite_in_place(self.path, (json.dumps(self.data, indent=2, default=str) + "\n").encode())
        self._last_write = self.clock()
        self._dirty = False

    def __call__(self, event: Event, state: object = None) -> None:
        d = self.data
        match event:
            case RunStarted():
                previous = read_run(self.path.parent) or {}
                resumed = bool(event.resumed_from) and bool(previous)
                # a resumed run keeps its first start time and best checkpoint so far
                d["started"] = previous.get("started") if resumed and previous.get("started") else iso_time(event.time)
                d["resumes"] = int(previous.get("resumes", 0) or 0) + 1 if resumed else 0
                d["best"] = (previous.get("best") or {}) if resumed else {}
                d.update(
                    status="running",
                    exit_code=None,
                    ended=None,
                    reason="",
                    requeued=False,
                    error="",
                    paused=False,
                    experiment=event.experiment,
                    env=event.env,
                    epochs=event.epochs,
                    epoch=event.start_epoch,
                    step=event.start_step,
                    pid=event.pid or os.getpid(),
                )
                self._monitor = (
                    str((event.config.get("checkpoint") or {}).get("monitor", ""))
                    if isinstance(event.config, dict)
                    else ""
                )
                self.write()
            case EpochStarted(epoch=epoch, step=step):
                d.update(epoch=epoch, step=step)
                self._dirty = True
            case MetricsLogged(epoch=epoch, step=step):
                d.update(epoch=epoch, step=step)
                self._dirty = True
                if self._last_write is None or self.clock() - self._last_write >= self.interval:
                    self.write()
            case EpochCompleted(epoch=epoch, step=step):
                d.update(epoch=epoch, step=step)
                self.write()
            case CheckpointSaved(best=True):
                d["best"] = {
                    "file": event.file,
                    "monitor": self._monitor,
                    "value": event.metrics.get(self._monitor) if self._monitor else None,
                    "epoch": event.epoch,
                    "step": event.step,
                }
                self.write()
            case CheckpointSaved():
                self.write()
            case RunPaused() | RunResumed():
                d.update(paused=isinstance(event, RunPaused), epoch=event.epoch, step=event.step)
                self.write()
            case RunFinished():
                if event.best:
                    known = d["best"] if d["best"].get("file") == event.best.get("file") else {}
                    d["best"] = {
                        "file": event.best.get("file"),
                        "monitor": event.best.get("monitor", ""),
                        "value": event.best.get("value"),
                        "epoch": event.best.get("epoch", known.get("epoch")),
                        "step": event.best.get("step", known.get("step")),
                    }
                d.update(
                    status=event.status,
                    exit_code=event.exit_code,
                    ended=iso_time(event.time),
                    epoch=event.epoch,
                    step=event.step,
                    reason=event.reason,
                    paused=False,
                )
                self.write()
            case JobRequeued(requeued=requeued):
                d["requeued"] = requeued
                self.write()
            case RunFailed():
                d.update(
                    status="failed",
                    exit_code=event.exit_code,
                    ended=iso_time(event.time),
                    epoch=event.epoch,
                    step=event.step,
                    reason=event.cause or "failed",
                    error=event.error,
                    paused=False,
                )
                self.write()

    def close(self) -> None:
        if self._dirty and self.data.get("started"):
            self.write()
