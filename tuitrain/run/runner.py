"""From a config to a running Learner: the run directory, the sinks, the control watcher, signals.

`prepare_run` does every check that can fail before anything is written (config, theme, resume
checkpoint); `Run.execute` creates nothing until then, builds the user's model and data, trains and
returns the exit code. The CLI and the dashboard drive a `Run`; this module never imports textual.
"""

from __future__ import annotations

import dataclasses

import os
import sys
from pathlib import Path
from collections.abc import Callable

from tuitrain.config import Config, ConfigError, load_config
from tuitrain.core.callbacks import EventBus
from tuitrain.core.control import Interrupter
from tuitrain.core.events import RunStarted
from tuitrain.core.lifecycle import run_failed
from tuitrain.core.output import capture_output
from tuitrain.run.directories import claim_run_dir, claimed_runs, find_runs, new_run_dir
from tuitrain.run.preflight import preflight, resume_mismatch
from tuitrain.run.session import RunSession
from tuitrain.run.signals import StopOnSignals, carry_preemption


class UsageError(Exception):
    """A bad command line or resume target: exit 2, nothing written."""


#: what `--resume auto` continues: a run that did not complete (KILLED: "running", its process gone)
UNFINISHED = ("interrupted", "failed", "killed")


def resolve_auto(cfg: Config, run_dir: str | None = None) -> tuple[Path, Path] | None:
    """`--resume auto`: (run_dir, checkpoint) of the experiment's newest run (or `--run-dir`'s) when it did
    not complete and has a sound checkpoint; None: start a new run. Only the newest run is looked at: an
    older unfinished one was left behind by a newer run."""
    from tuitrain.sinks.run_status import live_status

    if run_dir is not None:  # the newest of the runs placed there: `run_dir`, then `run_dir-2` ...
        candidates = [p for p in claimed_runs(run_dir) if (p / "run.json").is_file()][-1:]
    else:
        candidates = find_runs(Path(cfg.experiment.dir) / cfg.experiment.name)[:1]
    for run in candidates:
        status = live_status(run)
        if status == "running":
            raise UsageError(f"--resume auto: the run in {run} is still live; stop it first (tuitrain stop {run})")
        if status not in UNFINISHED:
            return None
        found = _newest_sound(run / "checkpoint", "auto")
        return (run, found) if found is not None else None
    return None


def _newest_sound(folder: Path, spec: str) -> Path | None:
    from tuitrain.core.checkpoint import latest_checkpoint

    passed_over: list[tuple[Path, str]] = []
    found = latest_checkpoint(folder, passed_over)
    for path, why in passed_over:  # said once, on stderr, before the run's own lines
        print(f"tuitrain: --resume {spec}: passed over {path}: {why}", file=sys.stderr)
    return found


def resolve_resume(spec: str, cfg: Config) -> tuple[Path, Path]:
    """(run_dir, checkpoint) for `--resume latest|PATH`; a checkpoint is a file, or a sharded
    checkpoint's directory (strategy "fsdp")."""
    from tuitrain.core.checkpoint import is_sharded_checkpoint

    def newest_sound(folder: Path) -> Path | None:
        return _newest_sound(folder, spec)

    if spec == "latest":
        root = Path(cfg.experiment.dir) / cfg.experiment.name
        for run in find_runs(root):
            found = newest_sound(run / "checkpoint")
            if found is not None:
                return run, found
        raise UsageError(f"--resume latest: no complete, sound checkpoint in any run under {root}")
    p = Path(spec)
    if p.is_file() or is_sharded_checkpoint(p):
        run = p.parent.parent if p.parent.name == "checkpoint" else p.parent
        return run, p
    if p.is_dir():
        folder = p / "checkpoint" if (p / "checkpoint").is_dir() else p
        found = newest_sound(folder)
        if found is None:
            raise UsageError(f"--resume {spec}: no complete, sound checkpoint listed in {folder}/index.json")
        run = folder.parent if folder.name == "checkpoint" else folder
        return run, found
    raise UsageError(f"--resume {spec}: no such file or run directory")


def left_to_train(data: dict, cfg: Config, what: str) -> None:
    """Refuse (UsageError, exit 2) a resume whose checkpoint is past this config's `train.epochs` or
    `train.max_steps`: it would train nothing, then call the run completed and write a checkpoint named with
    this config's epochs at the old step. The line names the `--set` that continues. A checkpoint exactly at
    the end (a completed run resumed with its own config; `--resume auto` after a kill that came between the
    last checkpoint and the run's end) is not refused: the run ends at once, completed, its summary shown."""
    epoch, step, stage = int(data.get("epoch") or 0), int(data.get("step") or 0), data.get("stage")
    started = (data.get("config") or {}).get("train") or {}
    at = f"{what} is at epoch {epoch}, step {step}"
    epochs, max_steps = cfg.train.epochs, cfg.train.max_steps
    need = epoch + 1 if stage == "done" else epoch  # the epochs that continuing it needs at least
    if epochs and epoch > epochs:
        was = started.get("epochs") or 0
        n = was if was >= need else need
        raise UsageError(
            f"{at}, past train.epochs = {epochs}: nothing is left to train "
            f"(--set train.epochs={n} continues it"
            f"{f': the {was} it was started with' if n == was else ''})"
        )
    if max_steps and step > max_steps:
        was = started.get("max_steps") or 0
        how = (
            f"--set train.max_steps={was} continues it: the {was} it was started with"
            if was > step
            else "--set train.max_steps=0 continues it with no step limit"
            if not was
            else f"--set train.max_steps=N with N > {step} continues it"
        )
        raise UsageError(f"{at}, past train.max_steps = {max_steps}: nothing is left to train ({how})")


def misfit_line(spec: str, checkpoint: Path | None, run_dir: Path, why: str) -> str:
    """The one line that refuses `--resume spec` whose `checkpoint` this config's model cannot load."""
    return (
        f"--resume {spec}: {checkpoint} does not fit this config: {why}; nothing was changed "
        f"(resume with the config it was trained with: {run_dir / 'config.toml'})"
    )


def prepare_run(
    config_path: str | os.PathLike,
    overrides=(),
    *,
    run_dir: str | None = None,
    resume: str | None = None,
    headless: bool = True,
    theme: str | None = None,
) -> Run:
    """Every check that can fail before training; raises ConfigError/UsageError (exit 2)."""
    overrides = list(overrides)
    if theme:
        from tuitrain.dashboard.themes import ThemeError, resolve_theme

        try:
            resolve_theme(theme, Path.cwd())
        except ThemeError as e:
            raise ConfigError(str(e), file="--theme") from None
        overrides.append(f"dashboard.theme={Path(theme).resolve() if theme.endswith('.tcss') else theme}")
    cfg = load_config(config_path, overrides)
    preflight(cfg)
    notes: list[str] = []  # said right after the run starts (its log, the console, the dashboard)
    ckpt_data = None
    ckpt_path = None
    resume_auto = resume == "auto"
    spec = resume or ""  # as given: `auto` becomes the checkpoint it found
    if resume_auto:
        from tuitrain.core.strategies import quiet_rank

        # under torchrun rank 0 decides and tells the others once the process group is up (see
        # Run.agree_on_resume): every rank then loads the same checkpoint, whatever each would see in files
        found = None if quiet_rank() else resolve_auto(cfg, run_dir)
        resume = str(found[1]) if found else None
    if resume:
        from tuitrain.core.checkpoint import CheckpointError, load_checkpoint

        rdir, ckpt_path = resolve_resume(resume, cfg)
        from tuitrain.sinks.run_status import live_status

        if live_status(rdir) == "running":
            raise UsageError(
                f"--resume {resume}: the run in {rdir} is still live; stop it first (tuitrain stop {rdir})"
            )
        try:
            ckpt_data = load_checkpoint(ckpt_path)
        except CheckpointError as e:
            raise UsageError(str(e)) from None
        left_to_train(ckpt_data, cfg, f"--resume {resume}: {ckpt_path}")
        # a checkpoint this config's model cannot load is refused here, before the run directory is written
        # (it used to fail in training: run.json failed at step 0, config.toml rewritten)
        why = resume_mismatch(cfg, ckpt_data)
        if why is not None:
            raise UsageError(misfit_line(spec, ckpt_path, rdir, why))
        # `--resume auto --run-dir X` continues the newest run placed there (X, or X-2 ... once X held one)
        placed = [Path(run_dir), *(claimed_runs(run_dir) if resume_auto else [])] if run_dir else []
        if run_dir and rdir.resolve() not in {p.resolve() for p in placed}:
            raise UsageError(
                f"--run-dir and --resume name different run directories; a resumed run continues in {rdir}"
            )
        path = rdir
    else:
        from tuitrain.core.strategies import quiet_rank

        path = Path(run_dir) if run_dir else new_run_dir(cfg)
        # one run per folder: a --run-dir that holds a run gets a sibling (every rank sees the same folders
        # here: under torchrun rank 0 makes its run directory only once all ranks meet in the process group)
        claimed = claim_run_dir(path) if run_dir else path
        if claimed != path:
            notes.append(f"{path} holds a run already: this run goes to {claimed} (--resume {path} continues that one)")
            path = claimed
        if path.exists() and any(path.iterdir()) and not quiet_rank():  # rank 0 may have made it already
            raise UsageError(f"--run-dir {path}: folder exists and is not empty (use --resume {path} to continue it)")
    run = Run(cfg, path, headless=headless, resume_data=ckpt_data, resume_path=ckpt_path)
    run.resume_auto = resume_auto
    run.resume_spec = spec
    run.notes = notes
    return run


class Run:
    """One training run in one run directory; `execute()` trains and returns the exit code."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        *,
        headless: bool = True,
        resume_data: dict | None = None,
        resume_path: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.headless = headless
        self.resume_data = resume_data
        self.resume_path = resume_path
        self.interrupter = Interrupter()
        self.resume_auto = False  # `--resume auto`: under torchrun, rank 0's choice is every rank's
        self.resume_spec = ""  # `--resume`'s value as given (latest, auto, a path), for the lines that name it
        self.notes: list[str] = []  # lines for the run's log once it starts ("this run goes to ...")
        self._callbacks: list[tuple[Callable, bool | None]] = []
        self.result = None
        self.bus: EventBus | None = None  # the run's event bus while it trains (a screen that fails emits on it)
        #: a config error found only while building (exit 2): the CLI prints it
        self.config_error: ConfigError | None = None

    def subscribe(self, callback: Callable, steps: bool | None = None) -> None:
        self._callbacks.append((callback, steps))

    # --- signals (main thread only) ------------------------------------------------------------

    def install_signal_handlers(self, sigint: bool = True) -> None:
        """SIGTERM (and SIGINT unless the dashboard reads Ctrl+C as a key) stop gracefully; a second
        SIGINT raises KeyboardInterrupt. Kept for the life of the process."""
        StopOnSignals(self.interrupter, sigint).__enter__()

    # --- building ------------------------------------------------------------------------------

    def build(self, bus: EventBus, dist=None):
        """The user's model, data, loss, optimizer, scheduler, metrics: a Learner and its data (`dist`:
        this rank's DistContext, None in one process)."""
        from tuitrain.run.build import build_learner

        return build_learner(
            self.cfg, self.run_dir, bus, self.interrupter, dist=dist, headless=self.headless, notes=self.notes
        )

    # --- running -------------------------------------------------------------------------------

    def session(self, *, devices: bool = True, inline_chores: bool = False) -> RunSession:
        """The run directory of this run, as a `RunSession` (not yet open); `self.bus` is its bus."""
        from tuitrain.run.slurm import RequeueOnPreemption

        session = RunSession(
            self.run_dir,
            config=self.cfg.to_toml(),
            interrupter=self.interrupter,
            tensorboard=self.cfg.log.tensorboard,
            console=self.headless,
            devices=devices,
            callbacks=self._callbacks,
            inline_chores=inline_chores,
            alerts=dataclasses.asdict(self.cfg.alerts),
        )
        # the one process that owns the run directory asks for the requeue (one process, the parent of
        # spawned ranks, torchrun's rank 0); last, so that every other callback has the RunFinished first
        session.callbacks.append((RequeueOnPreemption(session.bus, self.cfg.train.requeue), False))
        self.bus = session.bus
        return session

    def execute(self) -> int:
        """Train; returns 0, 1 or 130. Errors in user code become a RunFailed event, never a raise.
        Where it trains is decided here, once: in this process, or spawned ranks, or as a torchrun rank."""
        from tuitrain.run.preflight import distributed_wanted

        if distributed_wanted(self.cfg):
            from tuitrain.run.launch import execute_distributed

            return execute_distributed(self)
        return self.train_here()

    def train_here(self, dist=None) -> int:
        """Train in this process: one process (the loop does the chores itself while it is quick: see
        Housekeeping), or rank 0 of torchrun's ranks (`dist`), which owns the run directory."""
        session = self.session(inline_chores=dist is None)
        bus = session.bus
        session.open()
        try:
            try:
                # what the user's code prints while its model, data and optimizer are built is part of
                # the run: experiment.log and the screen get it, as they get what it prints in training
                with capture_output(bus.emit):
                    learner, train, valid = self.build(bus, dist)
            except ConfigError as e:  # what only building shows (a factory that returns no optimizer)
                self.config_error = e
                return 2
            except Exception as e:  # the user's constructors failed: a failed run, with its traceback
                self._build_failed(bus, e)
                return 1
            why = self._misfit(learner) if dist is None else None
            if why is not None:  # a model the check before the run could not build (see resume_mismatch)
                self.config_error = ConfigError(why)
                return 2
            carry_preemption(self.interrupter, learner)
            result = learner.fit(train, valid, resume=self.resume_data, resumed_from=self.resume_path)
            self.result = result
            return result.exit_code
        finally:  # a config error leaves no run directory behind
            session.close(discard=self.config_error is not None)

    def _misfit(self, learner) -> str | None:
        """The line that refuses a resume whose checkpoint the built model or optimizers cannot load; None when
        it loads (or is sharded: its shards say)."""
        data = self.resume_data
        if data is None or not isinstance(data.get("model"), dict):
            return None
        try:
            why = learner.ckpt_io.mismatch(data, "this config's")
        except Exception:  # a checkpoint of a shape not foreseen here: the load says what is wrong
            return None
        return (
            None
            if why is None
            else misfit_line(self.resume_spec or str(self.resume_path), self.resume_path, self.run_dir, why)
        )

    def agree_on_resume(self, dist) -> None:
        """`--resume auto` under torchrun: rank 0's choice (a checkpoint, or a new run) reaches every rank
        over the process group, so that all load the same checkpoint even where their views of the files
        differ (another host, a run.json rewritten meanwhile)."""
        if not self.resume_auto:
            return
        import torch.distributed as tdist

        choice = [str(self.run_dir), str(self.resume_path or "")] if dist.rank == 0 else [None, None]
        tdist.broadcast_object_list(choice, src=0, group=dist.control_group)
        if dist.rank != 0:
            self.run_dir = Path(choice[0])
            self.resume_path = Path(choice[1]) if choice[1] else None

    def _build_failed(self, bus: EventBus, e: BaseException) -> None:
        cfg = self.cfg
        bus.emit(
            RunStarted(
                run_dir=str(self.run_dir),
                experiment=cfg.experiment.name,
                epochs=cfg.train.epochs,
                max_steps=cfg.train.max_steps,
                steps_per_epoch=0,
                batch_size=cfg.data.batch_size,
                pid=os.getpid(),
                config=cfg.to_dict(),
            )
        )
        bus.emit(run_failed(e))
