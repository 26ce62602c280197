"""Starting the ranks of a DDP or FSDP run and carrying their events to the one process that owns the output.

Spawned (`strategy = "ddp"` or `"fsdp"`, `devices = N`): the parent keeps the run directory, the sinks, the
headless console or the dashboard and the control channel; it starts N ranks (spawn context), sends
rank 0 the control requests it receives, re-emits rank 0's events (and what the other ranks must
report) on its bus, and watches the ranks: when one fails or dies, the others are killed within
seconds, its error becomes the run's RunFailed and the exit code is 1.
torchrun: every rank runs `tuitrain run`; rank 0 is an ordinary run that owns the output, the other
ranks train quietly. What runs inside a rank (the process group, the DDP and FSDP strategies) is the
core's, in `tuitrain/core/strategies/`. Must not import textual.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuitrain.config import ConfigError
from tuitrain.run.preflight import check_ranks, distributed_wanted  # noqa: F401 (imported from here too)
from tuitrain.core.events import DevicesSampled, Event, RunFailed, RunFinished, RunStarted
from tuitrain.core.lifecycle import run_failed
from tuitrain.core.strategies import torchrun_env

FAIL_GRACE = 2.0  # seconds the other ranks get to report after one fails, before they are killed
DONE_GRACE = 60.0  # seconds the other ranks get to finish after one exits cleanly


@dataclass
class WorkerSpec:
    cfg: Any
    run_dir: str
    resume_path: str | None
    world_size: int
    init_method: str
    wants_steps: bool | str  # what the parent's callbacks take: True, "sampled" or False
    run_type: type  # the parent's Run class: each rank builds its own Run of it from `cfg`
    parent_pid: int = 0  # the launcher: a rank whose parent is no longer it ends at once


check_config = check_ranks  # its earlier name


def strategy_of(cfg) -> str:
    """ "fsdp", or "ddp" (also what torchrun gives a config whose strategy is "single")."""
    return "fsdp" if cfg.train.strategy == "fsdp" else "ddp"


def execute_distributed(run) -> int:
    """`Run.execute` for a distributed run: torchrun's rank, or the parent of spawned ranks."""
    env = torchrun_env()
    if env is not None:
        return _torchrun(run, *env)
    return _spawn(run)


# --- torchrun -----------------------------------------------------------------------------------


def _torchrun(run, rank: int, world: int, local_rank: int) -> int:
    from tuitrain.core.strategies.ddp import init_distributed, shutdown_distributed

    dist = init_distributed(rank, world, local_rank, run.cfg.train.device, _attempt_init_method(), strategy_of(run.cfg))
    code = 1
    try:
        run.agree_on_resume(dist)  # `--resume auto`: rank 0's choice, on every rank
        # rank 0 is an ordinary run, its Learner's strategy DDP's (or FSDP's)
        code = run.train_here(dist) if rank == 0 else _train_quietly(run, run.resume_path, dist=dist, signals=True)
    finally:
        shutdown_distributed(code in (0, 130))
    if rank != 0:  # nothing left to do: skip C++ teardown at exit, where gloo can abort (SIGABRT)
        if code == 2:  # a config error: torchrun ends every rank once one exits; rank 0 says it first
            time.sleep(3.0)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


ATTEMPT_SCHEME = "tuitrain-attempt"


def _attempt_init_method() -> str:
    """torchrun's env:// rendezvous with the store's keys under this attempt's own prefix.

    torchrun's agent keeps one store for all attempts (static and c10d rendezvous alike), so after
    `--max-restarts` restarts the workers a new process group would read the dead ranks' addresses that
    the first attempt left there (gloo: "connectFullMesh failed ... Connection refused").
    TORCHELASTIC_RESTART_COUNT is the same on every rank of an attempt."""
    from torch.distributed import PrefixStore
    from torch.distributed.rendezvous import register_rendezvous_handler, rendezvous

    def handler(url, timeout=None, **kwargs):
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store, rank, world = next(rendezvous("env://", **({"timeout": timeout} if timeout else {})))
        yield PrefixStore(f"tuitrain/attempt-{attempt}", store), rank, world

    try:
        register_rendezvous_handler(ATTEMPT_SCHEME, handler)
    except RuntimeError:  # registered already (a second run in this process)
        pass
    return f"{ATTEMPT_SCHEME}://"


def _train_quietly(
    run, resume_path, bus=None, on_built=None, capture: bool = False, dist=None, signals: bool = False
) -> int:
    """Build and fit this rank with nothing but `bus` listening; the exit code.
    `on_built(learner, train_loader)` is called before training starts. `capture`: what the user's
    code prints while it builds is an event too (rank 0: it reaches experiment.log), as in training.
    `signals` (a torchrun rank): SIGTERM, SIGINT and SIGUSR1/2 reaching this rank raise a request in its
    own Interrupter, which the agreement carries to every rank (all stop at the same step, with a
    checkpoint); spawned ranks leave signals to their parent."""
    from tuitrain.core.callbacks import EventBus
    from tuitrain.core.output import capture_output
    from tuitrain.run.signals import carry_preemption

    if signals:
        from tuitrain.run.signals import StopOnSignals

        StopOnSignals(run.interrupter, sigint=True).__enter__()  # for the life of the process
    bus = bus if bus is not None else EventBus()
    try:
        with capture_output(bus.emit) if capture else contextlib.nullcontext():
            learner, train, valid = run.build(bus, dist)
        carry_preemption(run.interrupter, learner)
        if on_built is not None:
            on_built(learner, train)
    except ConfigError as e:  # what only building shows (a factory that returns no optimizer): exit 2
        bus.emit(run_failed(str(e), exit_code=2, cause="config_error"))
        return 2
    except Exception as e:
        bus.emit(run_failed(e))
        return 1
    resume = None
    if resume_path:
        from tuitrain.core.checkpoint import load_checkpoint

        resume = load_checkpoint(resume_path)
    result = learner.fit(train, valid, resume=resume, resumed_from=resume_path)
    return result.exit_code


# --- spawned ranks ------------------------------------------------------------------------------


class _QueueSink:
    """A rank's bus -> the parent: rank 0 sends everything, the others what the parent needs."""

    def __init__(self, q, rank: int) -> None:
        self.q = q
        self.rank = rank

    def __call__(self, event: Event, state: Any) -> None:
        if self.rank == 0:
            self.q.put((0, event))
        elif isinstance(event, (RunFailed, DevicesSampled)):
            self.q.put((self.rank, event))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_main(rank: int, spec: WorkerSpec, events, control) -> None:
    """The entry point of a spawned rank."""
    # the parent decides on signals (Ctrl+C reaches the whole process group) and forwards a stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal: the parent goes on detached, so do we
    log_dir = Path(spec.run_dir) / "ranks"
    log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_dir / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)  # below Python (C++ warnings, crashes): a file, never the parent's screen
    os.dup2(fd, 2)
    os.close(fd)
    from tuitrain.core.strategies.ddp import init_distributed, shutdown_distributed, watch_parent

    watch_parent(spec.parent_pid)
    cfg = spec.cfg
    if "OMP_NUM_THREADS" not in os.environ and not cfg.train.device.startswith("cuda"):
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // spec.world_size))
    from tuitrain.core.callbacks import EventBus
    from tuitrain.core.control import Interrupter, apply_command

    code = 1
    bus = EventBus()
    steps = spec.wants_steps if rank == 0 else False
    # a sink that takes per-step events keeps them in order with the rest: not batched
    bus.subscribe(_QueueSink(events, rank), steps=steps, batched=not steps)
    monitors: list = []
    try:
        run = spec.run_type(cfg, Path(spec.run_dir), headless=True)
        run.interrupter = Interrupter()
        if control is not None:

            def listen():
                while True:
                    item = control.get()
                    if item is None:
                        return
                    apply_command(run.interrupter, *item)  # (command, source, detail); a preemption too

            threading.Thread(target=listen, name="tuitrain-control-in", daemon=True).start()
        dist = init_distributed(rank, spec.world_size, rank, cfg.train.device, spec.init_method, strategy_of(cfg))
        code = _train_quietly(
            run,
            spec.resume_path,
            bus,
            capture=rank == 0,
            dist=dist,
            on_built=lambda learner, train: monitors.append(_rank_monitor(bus, rank, learner, train)),
        )
    except BaseException as e:  # setting up the rank failed: report it like a failure in training
        bus.emit(run_failed(e))
        code = 1
    finally:
        for m in monitors:
            m.close()
        events.close()
        events.join_thread()  # every event reaches the parent before this process ends
        shutdown_distributed(code in (0, 130))
    sys.stdout.flush()
    os._exit(code)


def _rank_monitor(bus, rank: int, learner, train):
    """This rank's devices, CPU and throughput, sampled on a thread: the devices panel's rank rows."""
    from tuitrain.core.devices import DeviceMonitor

    per_step = (getattr(train, "batch_size", None) or 0) * max(1, learner.grad_accumulation)

    def progress() -> tuple[int, int]:
        step = learner.state.step
        return step, step * per_step

    monitor = DeviceMonitor(bus.emit, rank=rank, progress=progress)
    bus.subscribe(monitor.start_on_run_started, steps=False)
    return monitor


def _spawn(run) -> int:
    import multiprocessing as mp

    cfg = run.cfg
    world = cfg.train.devices
    session = run.session(devices=False)  # each rank samples its own devices (see _rank_monitor)
    bus = session.bus
    session.open()
    ctx = mp.get_context("spawn")
    with _stderr_with_a_fileno():
        events = ctx.Queue()  # starts multiprocessing's resource tracker, which inherits sys.stderr's fd
        control = ctx.Queue()
    procs: list = []
    try:
        spec = WorkerSpec(
            cfg,
            str(run.run_dir),
            str(run.resume_path) if run.resume_path else None,
            world,
            f"tcp://127.0.0.1:{_free_port()}",
            bus.step_mode,
            type(run),
            os.getpid(),
        )
        for r in range(world):
            p = ctx.Process(
                target=worker_main, args=(r, spec, events, control if r == 0 else None), name=f"tuitrain-rank-{r}"
            )
            p.start()
            procs.append(p)
        return _supervise(run, bus, procs, events, control)
    finally:
        _kill(procs)
        control.put(None)
        for q in (events, control):
            q.cancel_join_thread()
            q.close()
        _tidy_rank_logs(run.run_dir / "ranks")
        session.close(discard=run.config_error is not None)  # a config error leaves no run directory


def _tidy_rank_logs(folder: Path) -> None:
    """Keep a rank's raw output only when there is some (a crash below Python, a library's warning)."""
    try:
        for p in folder.glob("rank-*.log"):
            if p.stat().st_size == 0:
                p.unlink()
        folder.rmdir()
    except OSError:
        pass


@contextlib.contextmanager
def _stderr_with_a_fileno():
    """Under the dashboard sys.stderr is a capture without a file descriptor, and multiprocessing's
    helper process cannot start from it: lend it /dev/null for that moment."""
    try:
        ok = sys.stderr is not None and sys.stderr.fileno() >= 0
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        ok = False
    if ok:
        yield
        return
    saved = sys.stderr
    with open(os.devnull, "w") as null:
        sys.stderr = null
        try:
            yield
        finally:
            sys.stderr = saved


def _kill(procs: list, grace: float = 0.0) -> None:
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.exitcode is None:
            p.kill()
    for p in procs:
        p.join(5)


def _supervise(run, bus, procs: list, events, control) -> int:
    """Re-emit the ranks' events until every rank has ended; the run's exit code."""
    world = len(procs)
    ends: dict[int, Event] = {}  # rank -> its RunFinished / RunFailed
    failed: list[int] = []  # ranks that failed, first first
    trouble_since: float | None = None
    done_since: float | None = None
    killed_by_user = False

    def handle(rank: int, ev: Event) -> None:
        nonlocal trouble_since
        if isinstance(ev, (RunFinished, RunFailed)):
            ends.setdefault(rank, ev)
            if isinstance(ev, RunFailed) and rank not in failed:
                failed.append(rank)
                trouble_since = trouble_since or time.monotonic()
            return
        if isinstance(ev, RunStarted):  # the run is this process: its pid is the one to signal
            ev = replace(ev, pid=os.getpid(), env={**ev.env, "strategy": strategy_of(run.cfg), "world_size": world})
        if type(ev).persistent:
            bus.emit(ev)
        else:
            bus.emit_step(ev)

    def drain(timeout: float) -> None:
        try:
            item = events.get(timeout=timeout)
        except queue.Empty:
            return
        handle(*item)
        while True:
            try:
                item = events.get_nowait()
            except queue.Empty:
                return
            handle(*item)

    try:
        while True:
            for command, source, detail in run.interrupter.take_log():
                control.put((command, source, detail))
            drain(0.05)
            codes = [p.exitcode for p in procs]
            now = time.monotonic()
            if all(c is not None for c in codes):
                break
            for c in codes:
                if c is not None and c not in (0, 130):
                    trouble_since = trouble_since or now
                elif c is not None:
                    done_since = done_since or now
            if trouble_since is not None and now - trouble_since > FAIL_GRACE:
                break
            if done_since is not None and now - done_since > DONE_GRACE:
                break
    except KeyboardInterrupt:  # a second Ctrl+C: leave now; checkpoints already written stay valid
        killed_by_user = True
    _kill(procs, grace=0.0 if killed_by_user else 0.5)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # what the ranks sent before they ended
        try:
            handle(*events.get(timeout=0.05))
        except queue.Empty:
            break
    return _finish(run, bus, procs, ends, failed, killed_by_user)


def _finish(run, bus, procs, ends, failed, killed_by_user) -> int:
    if failed:
        r = failed[0]
        ev = ends[r]
        if ev.cause == "config_error":  # as in one process: the message, exit 2, no failed run recorded
            run.config_error = ConfigError(ev.error)
            return 2
        if len(procs) > 1:
            ev = replace(ev, error=f"rank {r}: {ev.error}")
        bus.emit(ev)
        return 1
    codes = [p.exitcode for p in procs]
    bad = [(r, c) for r, c in enumerate(codes) if c not in (0, 130)]
    if killed_by_user:
        end = ends.get(0)
        if isinstance(end, RunFinished):
            bus.emit(end)
            return end.exit_code
        bus.emit(
            RunFinished(
                status="interrupted", exit_code=130, epoch=0, step=0, reason="killed", duration=0.0, summary={}, best={}
            )
        )
        return 130
    if bad or not isinstance(ends.get(0), RunFinished):
        r, c = bad[0] if bad else (0, codes[0])
        how = f"killed by {signal.Signals(-c).name}" if c is not None and c < 0 else f"exit code {c}"
        tail = _log_tail(Path(run.run_dir) / "ranks" / f"rank-{r}.log")
        bus.emit(run_failed(f"rank {r} ended without a result ({how})", traceback=tail))
        return 1
    end = ends[0]
    bus.emit(end)
    return end.exit_code


def _log_tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""
