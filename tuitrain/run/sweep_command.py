"""`tuitrain sweep CONFIG.toml` and `tuitrain stop SWEEP_DIR` as commands: the config and its `[sweep]`
read and checked (exit 2 before anything runs), the study's workers (`Sweep`, tuitrain/run/sweep.py) run
headless or under the dashboard of the trials, and a stop asked of every running trial."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tuitrain.core.control import FileControl
from tuitrain.run.signals import PREEMPTION_SIGNALS
from tuitrain.run.sweep import EXIT_FAILED, STOP_FILE, Sweep
from tuitrain.run.sweep_spec import SweepSpec, set_item
from tuitrain.sinks.run_status import live_status


def _sweep_dir(cfg, spec: SweepSpec) -> Path:
    """<experiment.dir>/<experiment.name>/sweep-<name>/, experiment.dir as a run of the config has it
    (relative to the current folder)."""
    return Path(cfg.experiment.dir) / cfg.experiment.name / f"sweep-{spec.name}"


def stop_sweep(path: str | os.PathLike) -> list[Path]:
    """`tuitrain stop SWEEP_DIR`: no new trials; each live trial asked to stop. The live trials."""
    d = Path(path)
    (d / STOP_FILE).write_text(f"{time.time()}\n")
    live = [t for t in sorted(d.glob("trial-*")) if live_status(t) == "running"]
    for t in live:
        FileControl(t).send("stop", source="cli")
    return live


def sweep_command(
    config: str,
    overrides: list[str],
    trials: int | None,
    parallel: int | None,
    storage: str | None,
    say: Callable[[str], int],
    headless: bool = True,
) -> int:
    """The command: read and check the config and its [sweep] (exit 2 before anything runs), then work
    on the study until it has its trials (or a stop)."""
    from tuitrain.config import ConfigError, load_config
    from tuitrain.run.preflight import preflight
    from tuitrain.run.sweep_spec import read_spec

    extra = [f"sweep.trials={trials}"] if trials is not None else []
    extra += [f"sweep.parallel={parallel}"] if parallel is not None else []
    extra += [set_item("sweep.storage", storage)] if storage is not None else []
    try:
        cfg = load_config(config, [*overrides, *extra])
        spec = read_spec(cfg, config, overrides, check=preflight)  # as `tuitrain run` checks a config
    except ConfigError as e:
        return say(str(e))
    try:
        import optuna  # noqa: F401
    except ImportError:
        return say("sweep needs optuna: pip install 'tuitrain[sweep]'")
    sweep = Sweep(spec, config, [o for o in overrides if not o.startswith("sweep.")], _sweep_dir(cfg, spec))
    # Ctrl+C, SIGTERM and a cluster's "time is up" (SIGUSR1/SIGUSR2, as `tuitrain run` takes them): every
    # running trial stops with a checkpoint and is queued again in the study
    previous = {s: signal.signal(s, sweep.stop) for s in (signal.SIGINT, signal.SIGTERM, *PREEMPTION_SIGNALS)}
    try:
        if headless:
            return sweep.run()
        from tuitrain.dashboard.themes import resolve_theme

        theme = resolve_theme(cfg.dashboard.theme, cfg.base_dir)
        return _under_dashboard(sweep, theme)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _under_dashboard(sweep: Sweep, theme) -> int:
    """The workers on a thread, their lines in SWEEP_DIR/sweep.log, the trials compared live on the
    screen; leaving the dashboard (q, Ctrl+C) stops the sweep gracefully, and its end (the best trials)
    is printed on the terminal, alone: not the result of the trial the dashboard's panels follow (the first),
    which the dashboard prints on leaving a run it shows."""
    from tuitrain.dashboard.entry import sweep_app

    sweep.open_study()
    log_path = sweep.folder / "sweep.log"
    log = open(log_path, "a", encoding="utf-8")
    sweep.out = log
    code: list[int] = []
    worker = threading.Thread(target=lambda: code.append(sweep.run()), name="tuitrain-sweep", daemon=True)
    worker.start()
    try:
        app = sweep_app(sweep.folder, theme)
        leave = app.exit
        app.exit = lambda result=None, return_code=0, message=None: leave(result, return_code)  # no trial's result
        app.run()
    finally:
        if worker.is_alive():
            print(
                "tuitrain: stopping the sweep: each running trial saves a checkpoint and stops; the same "
                "command goes on with it later",
                flush=True,
            )
            sweep.stop()
            sweep.out = log  # (stop() said it in the log too)
        while worker.is_alive():
            worker.join(0.2)
        log.close()
    lines = log_path.read_text(encoding="utf-8").splitlines()
    start = max((i for i, ln in enumerate(lines) if ln.startswith("study ")), default=len(lines))
    print("\n".join(lines[start:]))  # the study's counts and its best trials
    return code[0] if code else EXIT_FAILED
