"""The control channel: stop, pause/resume and checkpoint-now requests for a running Learner.

The `Interrupter` holds flags that any thread (a signal handler, the dashboard, the file watcher)
may set; the loop reads them at step boundaries and never waits on the UI. `FileControl` is the
same channel across processes: `tuitrain stop RUN_DIR` drops a command file into
`RUN_DIR/control/`, and the `ControlWatcher` thread of the live run picks it up.
Must not import torch or textual.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Protocol
from collections.abc import Callable

from .housekeeping import Housekeeping

COMMANDS = ("stop", "pause", "resume", "toggle_pause", "checkpoint")
#: the source of a stop that is a preemption (SIGUSR1/SIGUSR2): "stop requested (preempted: SIGUSR1)"
PREEMPTED = "preempted"
#: the source of a stop that a sweep's pruner asked for (`tuitrain sweep`): the run ends interrupted,
#: reason "pruned"
PRUNED = "pruned"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)")
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def asked_by(source: str) -> str:
    """What a checkpoint asked for is marked with (`[checkpoint] keep_requested`): "dashboard" (the c
    key), "command" (`tuitrain checkpoint`), or the request's own source ("api", ...)."""
    if source in ("cli", "file"):
        return "command"
    return source or "request"


def stop_asked_for(source: str) -> bool:
    """A stop from a person (the dashboard, a signal, `tuitrain stop`, the API), whose checkpoint is
    theirs; not the run's own (max_time, a [watch] rule, a preemption)."""
    return source not in ("", PREEMPTED, PRUNED, "max_time", "watch", "failure")


def raise_in(thread: threading.Thread, error: type[BaseException]) -> None:
    """Raise `error` in `thread` at its next Python instruction (CPython's PyThreadState_SetAsyncExc): a
    second interrupt ends a run training on another thread at once, as it does one on the main thread
    (the loop takes a KeyboardInterrupt as "leave now": its earlier checkpoints stay, run.json says so)."""
    import ctypes

    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(error))


def parse_duration(text: str) -> float:
    """Seconds in "2h30m", "45m", "90s", "1d", "1.5h" ("" or "0": none); ValueError otherwise."""
    t = text.strip().lower().replace(" ", "")
    if t in ("", "0"):
        return 0.0
    parts = _DURATION.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise ValueError(f'{text!r} is not a duration: write it like "2h30m", "45m" or "90s"')
    return float(sum(float(n) * _UNIT[u] for n, u in parts))


class Controller(Protocol):
    """What a UI needs to steer a run, in-process or through its run directory."""

    def request_stop(self, source: str = "api", detail: str = "") -> None: ...
    def toggle_pause(self, source: str = "api") -> None: ...
    def request_checkpoint(self, source: str = "api") -> None: ...


class Interrupter:
    """Thread-safe flags polled by the loop. `pending` is one attribute read per step."""

    def __init__(self) -> None:
        # reentrant: a signal handler runs on the main thread, maybe while the loop there holds the lock
        self._lock = threading.RLock()
        self._resume = threading.Event()
        self._resume.set()
        self.stop_requested = False
        self.stop_source = ""
        #: why a stop ends the run: "stopped" or "preempted" (interrupted, exit 130), "max_time" (completed)
        self.stop_reason = "stopped"
        self.checkpoint_requested = False
        self.checkpoint_source = ""  # who asked for the checkpoint pending ("dashboard", "cli", ...)
        self.paused = False
        #: called (from the watchdog's thread) before the process ends itself on a stall (`[watch]
        #: stall_action = "abort"`): a screen gives the terminal back first; each may take a few seconds
        self.before_abort: list[Callable[[], None]] = []
        #: why the run must end as failed at the next step boundary ("" while nothing failed): a
        #: write of the run directory that failed (see EventBus.on_write_failure)
        self.failure = ""
        self.pending = False  # any of the above set: the loop's one cheap check
        # (command, source, detail) waiting to be reported as ControlReceived events by the loop
        self._log: list[tuple[str, str, str]] = []
        self.on_change: Callable[[], None] | None = None
        #: called once when a preemption comes in (the run layer carries the reason to a strategy's flags)
        self.on_preempt: list[Callable[[], None]] = []

    def _note(self, command: str, source: str, detail: str = "") -> None:
        self._log.append((command, source, detail))
        self.pending = True
        if self.on_change is not None:
            self.on_change()

    def request_stop(self, source: str = "api", detail: str = "") -> None:
        with self._lock:
            if not self.stop_requested:
                self.stop_requested = True
                self.stop_source = source
                if source == PRUNED:
                    self.stop_reason = PRUNED
            self._resume.set()  # a paused loop must wake up to stop
            self._note("stop", source, detail)

    def preempt(self, detail: str = "") -> None:
        """Time is up on the cluster (SIGUSR1/SIGUSR2): stop gracefully with a checkpoint, as interrupted
        with reason "preempted" (the run layer may requeue the job). An earlier stop keeps its reason."""
        with self._lock:
            first = not self.stop_requested
            if first:
                self.stop_requested = True
                self.stop_source = PREEMPTED
                self.stop_reason = "preempted"
            self._resume.set()
            self._note("stop", PREEMPTED, detail)  # a stop to every reader of the log (console, dashboard)
        if first:
            for hook in self.on_preempt:
                hook()

    def time_up(self, limit: str = "") -> None:
        """The run's time budget (`max_time`) is spent: stop gracefully, as a completed run."""
        with self._lock:
            if not self.stop_requested:
                self.stop_requested = True
                self.stop_source = "max_time"
                self.stop_reason = "max_time"
            self._resume.set()
            self._note("stop", "max_time", limit)

    def visit(self) -> None:
        """Have the loop come by its step boundary once (the Learner has work there: a validation)."""
        self.pending = True

    def fail(self, why: str) -> None:
        """End the run as failed at the next step boundary (the first reason is kept)."""
        with self._lock:
            self.failure = self.failure or why
            self.pending = True
            self._resume.set()  # a paused loop must wake up to end
            if self.on_change is not None:
                self.on_change()

    def request_checkpoint(self, source: str = "api") -> None:
        with self._lock:
            if not self.checkpoint_requested:
                self.checkpoint_source = source
            self.checkpoint_requested = True
            self._resume.set()
            self._note("checkpoint", source)

    def pause(self, source: str = "api") -> None:
        with self._lock:
            if not self.paused:
                self.paused = True
                self._resume.clear()
                self._note("pause", source)

    def resume(self, source: str = "api") -> None:
        with self._lock:
            if self.paused:
                self.paused = False
                self._resume.set()
                self._note("resume", source)

    def toggle_pause(self, source: str = "api") -> None:
        if self.paused:
            self.resume(source)
        else:
            self.pause(source)

    # --- the loop's side -------------------------------------------------------------------

    def take_log(self) -> list[tuple[str, str, str]]:
        with self._lock:
            log, self._log = self._log, []
            return log

    def take_checkpoint(self) -> bool:
        with self._lock:
            wanted, self.checkpoint_requested = self.checkpoint_requested, False
            self._refresh()
            return wanted

    def take_checkpoint_by(self) -> str:
        """Who asked for the checkpoint pending, clearing the request ("" when none is): see `asked_by`."""
        with self._lock:
            by = asked_by(self.checkpoint_source) if self.checkpoint_requested else ""
            self.checkpoint_source = ""
            self.take_checkpoint()
            return by

    def _refresh(self) -> None:
        self.pending = bool(
            self.stop_requested or self.checkpoint_requested or self.paused or self._log or self.failure
        )

    def settle(self) -> None:
        with self._lock:
            self._refresh()

    def wait_while_paused(self, timeout: float) -> bool:
        """Block the loop up to `timeout` s while paused; True when no longer paused."""
        return self._resume.wait(timeout)

    def sync(self) -> bool:
        """Across ranks, a blocking agreement on the flags (strategies/agreement.py); here nothing."""
        return False


# --- across processes: command files in RUN_DIR/control/ ------------------------------------


def control_dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / "control"


class FileControl:
    """A `Controller` for a run in another process, through its run directory."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)

    def send(self, command: str, source: str = "file") -> Path:
        if command not in COMMANDS:
            raise ValueError(f"unknown control command {command!r}")
        d = control_dir(self.run_dir)
        d.mkdir(exist_ok=True)
        # unique name, written then renamed so the watcher never reads half a file
        name = f"{time.time_ns()}-{os.getpid()}-{command}"
        tmp = d / f".{name}.tmp"
        tmp.write_text(source)
        final = d / f"{name}.cmd"
        os.replace(tmp, final)
        return final

    def request_stop(self, source: str = "file", detail: str = "") -> None:
        self.send("stop", source)

    def toggle_pause(self, source: str = "file") -> None:
        self.send("toggle_pause", source)

    def request_checkpoint(self, source: str = "file") -> None:
        self.send("checkpoint", source)


def apply_command(interrupter: Interrupter, command: str, source: str, detail: str = "") -> None:
    if command == "stop" and source == PREEMPTED:  # forwarded to a spawned rank 0
        interrupter.preempt(detail)
    elif command == "stop":
        interrupter.request_stop(source, detail)
    elif command == "checkpoint":
        interrupter.request_checkpoint(source)
    elif command == "pause":
        interrupter.pause(source)
    elif command == "resume":
        interrupter.resume(source)
    elif command == "toggle_pause":
        interrupter.toggle_pause(source)


class ControlWatcher:
    """Polls RUN_DIR/control/ on a daemon thread and applies the commands it finds."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        interrupter: Interrupter,
        interval: float = 0.5,
        housekeeping: Housekeeping | None = None,
    ) -> None:
        self.dir = control_dir(run_dir)
        self.interrupter = interrupter
        self.interval = interval
        self.housekeeping = housekeeping  # given: a chore of the run's (inline while the loop is quick)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ControlWatcher:
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.iterdir():  # commands meant for an earlier, dead process
            stale.unlink(missing_ok=True)
        # no housekeeping given: one that starts the thread at once
        (self.housekeeping or Housekeeping()).add(self.interval, self._poll_chore, self._start_thread)
        return self

    def _start_thread(self) -> None:
        if self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._run, name="tuitrain-control", daemon=True)
        self._thread.start()

    def _poll_chore(self) -> None:
        if not self._stop.is_set():
            self.poll_once()

    def poll_once(self) -> int:
        n = 0
        try:
            files = sorted(p for p in self.dir.iterdir() if p.suffix == ".cmd")
        except FileNotFoundError:
            return 0
        for p in files:
            command = p.stem.split("-", 2)[-1]
            taken = p.with_suffix(".taken")
            try:  # claimed by a rename: a sender that withdraws its file (unlink) and this never both win
                os.replace(p, taken)
            except FileNotFoundError:
                continue
            try:
                source = taken.read_text().strip() or "file"
            except OSError:
                source = "file"
            taken.unlink(missing_ok=True)
            apply_command(self.interrupter, command, source)
            n += 1
        return n

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
