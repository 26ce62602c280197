"""The run session: the one place that makes, fills and closes a run directory.

Every front door goes through it: `tuitrain run` (one process, or the parent of spawned ranks, or rank 0
under torchrun), `tuitrain.Learner.fit`, `Monitor` and the integrations built on Monitor. Opening it
makes the folder, writes the config, subscribes the standard sinks (events.jsonl, metric files,
experiment.log, run.json; TensorBoard when asked; the headless console lines when asked), starts the
device sampler and the control watcher (`tuitrain stop/checkpoint RUN_DIR`), and installs Ctrl+C /
SIGTERM handling. Closing undoes all of it, in order; `discard=True` (a config error found while
building) removes what it made, the run directory and the folders it created above it.

Where this process stands among ranks is decided once, by `placement()`. Must not import textual.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable

from tuitrain.core.callbacks import EventBus
from tuitrain.core.control import ControlWatcher, Interrupter
from tuitrain.core.fsutil import atomic_write_bytes, atomic_write_text
from tuitrain.core.housekeeping import Housekeeping
from tuitrain.core.strategies import torchrun_env
from tuitrain.run.signals import StopOnSignals


@dataclass(frozen=True)
class Placement:
    """Where this process stands: "single" (one process), "torchrun" (a rank started by torchrun) or
    "group" (a rank of a process group someone else started: Lightning's DDP, accelerate)."""

    kind: str
    rank: int = 0
    world_size: int = 1

    @property
    def owner(self) -> bool:
        """This process owns the run directory, the files, the console lines and the dashboard."""
        return self.rank == 0


def placement() -> Placement:
    """An initialized torch.distributed group wins; then torchrun's variables; else one process.
    torch is looked at only when the user's code has imported it."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        kind = "torchrun" if torchrun_env() is not None else "group"
        return Placement(kind, dist.get_rank(), dist.get_world_size())
    env = torchrun_env()
    if env is not None:
        return Placement("torchrun", env[0], env[1])
    return Placement("single")


def missing_folders(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def remove_made(made: list[Path]) -> None:
    """Remove what `missing_folders` listed: the run directory whole, then its new parents if empty."""
    if made:
        shutil.rmtree(made[0], ignore_errors=True)
    for folder in made[1:]:
        try:
            folder.rmdir()
        except OSError:  # something else lives there now
            break


def top_files(folder: Path) -> dict[str, int]:
    """The plain files right in `folder` (not in its subfolders), with their sizes."""
    try:
        with os.scandir(folder) as entries:
            return {e.name: e.stat().st_size for e in entries if e.is_file(follow_symlinks=False)}
    except OSError:
        return {}


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def write_config(run_dir: Path, config: dict | str | None) -> None:
    """config.toml: the text given (a resolved config), or a dict as TOML (as JSON in config.json when
    TOML cannot hold its values)."""
    if config is None:
        return
    if isinstance(config, str):
        atomic_write_text(run_dir / "config.toml", config)
        return
    from tuitrain.config.toml_writer import dumps

    try:
        text = dumps(config)
    except Exception:  # values TOML cannot hold: as JSON, with what is not JSON as text
        atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2, default=str))
        return
    atomic_write_text(run_dir / "config.toml", text)


class RunSession:
    """A run directory while a run writes it (see the module docstring).

    run_dir: the folder; config: the resolved config's TOML text or a dict; interrupter: the run's
    control flags (`tuitrain stop` and signals set them); bus: an event bus to fill (default: a new
    one); tensorboard: also the TensorBoard sink; console: the headless console lines; devices: sample
    CPU/GPUs for the devices panel; signals: None, or "sigint" (Ctrl+C and SIGTERM stop gracefully) or
    "sigterm" (Ctrl+C left to a dashboard); capture: what the process prints becomes events;
    inline_chores: the loop does the watcher's polling while it is quick (one process, see Housekeeping);
    files: False when the caller's bus already has its writers (the folder is then the caller's too);
    alerts: the `[alerts]` table (a webhook, a command; the environment's TUITRAIN_ALERTS_* fill it).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        config: dict | str | None = None,
        interrupter: Interrupter | None = None,
        bus: EventBus | None = None,
        tensorboard: bool = False,
        console: bool = False,
        devices: bool = True,
        signals: str | None = None,
        capture: bool = False,
        inline_chores: bool = False,
        callbacks: Iterable[tuple[Callable, Any]] = (),
        files: bool = True,
        alerts: Any = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.alerts = alerts
        self.config = config
        self.interrupter = interrupter or Interrupter()
        self.bus = bus if bus is not None else EventBus(housekeeping=Housekeeping(inline=inline_chores))
        self.tensorboard, self.console, self.devices = tensorboard, console, devices
        self.signals, self.capture = signals, capture
        self.callbacks = list(callbacks)
        self.files = files
        self._made: list[Path] = []
        self._stack = contextlib.ExitStack()
        self._closers: list = []
        self.opened = False

    def open(self) -> RunSession:
        from tuitrain.sinks.standard import standard_sinks

        self._made = missing_folders(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # a resumed run's config and run.json as they were, and the sizes of the files its sinks append to
        # (events.jsonl, experiment.log: what the user's code printed while it was built): put back if this
        # session is discarded (a config error, a checkpoint that does not fit the model)
        kept = ("config.toml", "config.json", "run.json")
        self._config_before = {name: _read_bytes(self.run_dir / name) for name in kept}
        self._sizes_before = {} if self._made else top_files(self.run_dir)
        write_config(self.run_dir, self.config)
        bus = self.bus
        if self.interrupter.fail not in bus.on_write_failure:
            bus.on_write_failure.append(self.interrupter.fail)  # a full disk ends the run at its next step
        for sink in standard_sinks(self.run_dir, tensorboard=self.tensorboard) if self.files else ():
            bus.subscribe(sink, steps=False)
        if self.console:
            from tuitrain.sinks.console import HeadlessConsole

            bus.subscribe(HeadlessConsole(), steps=False)
        for cb, steps in self.callbacks:
            bus.subscribe(cb, steps)
        from tuitrain.sinks.alerts import alert_sender

        sender = alert_sender(self.alerts, str(self.run_dir), say=bus.emit)
        if sender is not None:
            bus.subscribe(sender, steps=False)
        if self.devices:
            from tuitrain.core.devices import DeviceMonitor

            monitor = DeviceMonitor(bus.emit, housekeeping=bus.housekeeping)
            bus.subscribe(monitor.start_on_run_started, steps=False)
            self._closers.append(monitor.close)
        watcher = ControlWatcher(self.run_dir, self.interrupter, housekeeping=bus.housekeeping).start()
        self._closers.append(watcher.close)
        if self.signals is not None:
            self._stack.enter_context(StopOnSignals(self.interrupter, sigint=self.signals == "sigint"))
        if self.capture:
            from tuitrain.core.output import capture_output

            self._stack.enter_context(capture_output(bus.emit))
        self.opened = True
        return self

    def close(self, discard: bool = False) -> None:
        """Stop the watcher and samplers, restore signals and output, close the bus (its sinks); with
        `discard`, remove the run directory and the folders made for it."""
        if not self.opened:
            return
        self.opened = False
        try:
            for close in reversed(self._closers):
                close()
            self._closers.clear()
            self.bus.close()  # the run's last events are on disk ...
        finally:
            self._stack.close()  # ... before a SIGTERM may end the process again (torchrun ending a job)
            if discard:
                remove_made(self._made)
                if not self._made:  # the folder was there before (a resume): its files as they were
                    self._put_back()

    def _put_back(self) -> None:
        """A resumed run's folder as this session found it: config and run.json, appended files cut back."""
        for name, size in top_files(self.run_dir).items():
            if name in self._config_before:
                continue
            before = self._sizes_before.get(name)
            try:
                if before is None:  # made by this session
                    (self.run_dir / name).unlink(missing_ok=True)
                elif size > before:  # appended to by this session
                    os.truncate(self.run_dir / name, before)
            except OSError:
                pass
        for name, data in self._config_before.items():
            try:
                if data is None:
                    (self.run_dir / name).unlink(missing_ok=True)
                elif _read_bytes(self.run_dir / name) != data:
                    atomic_write_bytes(self.run_dir / name, data)
            except OSError:
                pass

    def __enter__(self) -> RunSession:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
