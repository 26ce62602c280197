"""The `tuitrain` command: argparse front for run, sweep, watch, serve, stop, checkpoint, ls and lr-find.

Heavy imports (torch, textual) happen inside the command that needs them, so `tuitrain --help`
answers fast. The dashboard is imported only when one opens.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_USAGE = 2


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1 to 65535)")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tuitrain", description="Train a PyTorch model from a TOML config and watch it live in the terminal."
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    r = sub.add_parser("run", help="train from CONFIG.toml (dashboard on a terminal, else headless)")
    r.add_argument("config", metavar="CONFIG.toml")
    r.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key with a TOML value, e.g. --set train.epochs=3 (repeatable)",
    )
    r.add_argument("--headless", action="store_true", help="plain progress lines, no dashboard")
    r.add_argument(
        "--resume",
        metavar="latest|auto|PATH",
        help="continue the newest run of this experiment, or a checkpoint file / run directory; "
        "auto: the newest run if it did not complete, else a new run (one command line for a "
        "job's first start and every restart)",
    )
    r.add_argument("--run-dir", metavar="DIR", help="write the run here instead of <dir>/<name>/<timestamp>")
    r.add_argument("--theme", metavar="NAME|FILE.tcss", help="dashboard theme (dark, light, high-contrast or a file)")
    sw = sub.add_parser(
        "sweep",
        help="a hyperparameter search over the config's [sweep] params (Optuna; "
        "pip install 'tuitrain[sweep]'): each trial a run of its own",
    )
    sw.add_argument("config", metavar="CONFIG.toml")
    sw.add_argument("--trials", type=int, metavar="N", help="trials in the study (sweep.trials)")
    sw.add_argument("--parallel", type=int, metavar="N", help="trials at once on this machine (sweep.parallel)")
    sw.add_argument(
        "--storage",
        metavar="URL",
        help="the study's storage: a database URL or a journal file (sweep.storage; default: SWEEP_DIR/study.journal)",
    )
    sw.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key for every trial (repeatable)",
    )
    sw.add_argument("--headless", action="store_true", help="plain lines, a line per trial")
    w = sub.add_parser(
        "watch",
        help="the dashboard of a live or finished run, from its files (tuitrain's, or TensorBoard, Lightning, "
        "MLflow, trackio, W&B logs); several runs (or a folder of runs) compared",
    )
    w.add_argument("run_dirs", metavar="PATH", nargs="+")
    w.add_argument("--theme", metavar="NAME|FILE.tcss")
    # Monitor's viewer: the run is the parent's, so Ctrl+C stops it instead of leaving the viewer
    w.add_argument("--owned", action="store_true", help=argparse.SUPPRESS)
    # a notebook's picture (tuitrain/run/notebook.py): the dashboard drawn headless to an SVG file each second
    w.add_argument("--frames", metavar="FILE.svg", help=argparse.SUPPRESS)
    w.add_argument("--size", metavar="COLSxROWS", default="120x40", help=argparse.SUPPRESS)
    sv = sub.add_parser(
        "serve",
        help="the dashboard of `watch` in a web browser, at one URL with a random token "
        "(pip install 'tuitrain[serve]')",
    )
    sv.add_argument("run_dirs", metavar="RUN_DIR|DIR", nargs="+")
    sv.add_argument("--port", type=_port, default=8000, help="default 8000")
    sv.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only; reach it with ssh -L)",
    )
    sv.add_argument("--theme", metavar="NAME|FILE.tcss")
    s = sub.add_parser("stop", help="ask a live run to stop gracefully (it saves a checkpoint)")
    s.add_argument("run_dir", metavar="RUN_DIR")
    c = sub.add_parser("checkpoint", help="ask a live run to write a checkpoint now")
    c.add_argument("run_dir", metavar="RUN_DIR")
    ls = sub.add_parser("ls", help="one line per run: name, started, status, epoch/step, best value")
    ls.add_argument("dir", metavar="PATH", nargs="?", default="runs", help="a folder of runs, or a CONFIG.toml")
    lr = sub.add_parser(
        "lr-find", help="learning-rate range test: a plot, the suggested lr and a CSV; nothing of the run is kept"
    )
    lr.add_argument("config", metavar="CONFIG.toml")
    lr.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key with a TOML value (repeatable)",
    )
    lr.add_argument("--min-lr", type=float, default=1e-7, help="where the sweep starts (default 1e-7)")
    lr.add_argument("--max-lr", type=float, default=10.0, help="where the sweep ends at the latest (default 10)")
    lr.add_argument("--steps", type=int, default=100, help="optimizer steps in the sweep (default 100)")
    lr.add_argument("--csv", metavar="PATH", help="where the sweep's CSV goes (default lr-find-<experiment>.csv)")
    return p


def _error(msg: str, code: int = EXIT_USAGE) -> int:
    print(f"tuitrain: error: {msg}", file=sys.stderr)
    return code


def cmd_run(args: argparse.Namespace) -> int:
    from .config import ConfigError
    from .run.runner import UsageError, prepare_run

    from .core.strategies import quiet_rank

    headless = args.headless or not sys.stdout.isatty() or quiet_rank()
    try:
        run = prepare_run(
            args.config, args.overrides, run_dir=args.run_dir, resume=args.resume, headless=headless, theme=args.theme
        )
    except (ConfigError, UsageError) as e:
        return _error(str(e))
    if headless:
        run.install_signal_handlers()
        code = run.execute()
    else:
        from .dashboard.themes import resolve_theme

        theme = resolve_theme(run.cfg.dashboard.theme, run.cfg.base_dir)  # checked with the config
        run.install_signal_handlers(sigint=False)  # the dashboard reads Ctrl+C as a key
        from .dashboard.entry import run_live

        code = run_live(run, theme)
    if run.config_error is not None:  # found only while building the user's parts
        return _error(str(run.config_error))
    if code == EXIT_STOPPED and not quiet_rank():
        print(way_on(args, Path(run.run_dir)), flush=True)
    return code


EXIT_STOPPED = 130  # Ctrl+C, q y, SIGTERM, `tuitrain stop`: the run saved a checkpoint and ended


def way_on(args: argparse.Namespace, run_dir: Path) -> str:
    """After a stop: the command line that continues the run (the config as typed, its --set, the
    absolute run directory), or why there is none (no checkpoint was written)."""
    import shlex

    from .core.checkpoint import read_index

    run_dir = run_dir.absolute()
    folder = run_dir / "checkpoint"  # listed and present (its hash is checked by the resume, not here)
    if not any((folder / e.file).exists() for e in read_index(folder)):
        return (
            f"no checkpoint was written in {run_dir}: nothing to continue from; "
            f"start again with: tuitrain run {shlex.quote(args.config)}"
        )
    line = ["tuitrain", "run", args.config]
    for override in args.overrides:
        line += ["--set", override]
    if args.headless:
        line.append("--headless")
    if args.theme:
        line += ["--theme", args.theme]
    return f"continue it: {shlex.join([*line, '--resume', str(run_dir)])}"


EXIT_NOT_DONE = 1  # stop/checkpoint: the run is not live, or did not take the request
ACK_TIMEOUT = 10.0  # seconds a live run gets to take a command file (its watcher polls every 0.5 s)


def _live_run_dir(path: str) -> Path | int:
    from .sinks.run_status import live_status, read_run

    d = Path(path)
    info = read_run(d)
    if info is None:
        return _error(f"{path}: not a run directory (no run.json)")
    status = live_status(d)
    if status != "running":
        return _error(f"{path}: the run is not live (status: {status}); nothing was asked", EXIT_NOT_DONE)
    return d


def cmd_control(args: argparse.Namespace, command: str) -> int:
    """Drop a command file into the live run's control folder, and wait until the run takes it: a
    request nobody reads is withdrawn and reported, never printed as done."""
    import time

    from .sources.sweep_files import is_sweep_dir

    if is_sweep_dir(args.run_dir) and command == "stop":
        from .run.sweep_command import stop_sweep

        live = stop_sweep(args.run_dir)
        print(
            f"{args.run_dir}: no new trials start; {len(live)} running trial(s) asked to stop gracefully "
            f"(each saves a checkpoint): {', '.join(p.name for p in live) or 'none'}"
        )
        return 0
    d = _live_run_dir(args.run_dir)
    if isinstance(d, int):
        return d
    from .core.control import FileControl

    sent = FileControl(d).send(command, source="cli")
    deadline = time.monotonic() + ACK_TIMEOUT
    while sent.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    what = _stop_says(d) if command == "stop" else _checkpoint_says(d)
    if sent.exists():
        try:
            sent.unlink()  # withdrawn: the run's watcher claims a file by renaming it, so only one wins
        except FileNotFoundError:
            pass  # taken at the last moment
        else:
            return _error(
                f"{d}: the run did not take the request within {ACK_TIMEOUT:.0f} s (its process "
                "does not listen to its control folder); nothing was asked",
                EXIT_NOT_DONE,
            )
    print(f"{d}: the run took the request to {what}")
    return 0


def _stop_says(run_dir: Path) -> str:
    """What a stop does to the run, by its loop (RunStarted's `loop`, the first line of events.jsonl), as
    the dashboard's `q` dialog says it: only tuitrain's own loop saves a checkpoint whatever the code
    does; a Hugging Face Trainer's saves none when the run's config says save_strategy is "no"."""
    started = _run_started(run_dir)
    if started is None:
        return "stop gracefully"
    loop = started.get("loop", "")
    if loop == "":
        return "stop gracefully (it saves a checkpoint first)"
    if loop == "monitor":
        return "stop (once the loop reads stop_requested; it saves a checkpoint if it checks checkpoint_requested)"
    if loop == "lightning":
        return "stop after this step (trainer.should_stop; a checkpoint first, unless save_on_stop=False)"
    if loop == "transformers":
        config = started.get("config")
        trainer = config.get("trainer") if isinstance(config, dict) else None
        strategy = trainer.get("save_strategy") if isinstance(trainer, dict) else None
        if strategy == "no":
            return 'stop after this step (should_training_stop; no checkpoint: its save_strategy is "no")'
        if isinstance(strategy, str):
            return "stop after this step (should_training_stop; the Trainer saves a checkpoint first)"
        return 'stop after this step (should_training_stop; a checkpoint unless save_strategy is "no")'
    return "stop"


def _checkpoint_says(run_dir: Path) -> str:
    """What `tuitrain checkpoint` has the run do: a loop of the user's own (a `Monitor`) writes one only
    if it checks checkpoint_requested; the others write one at the next step."""
    started = _run_started(run_dir)
    if started is not None and started.get("loop") == "monitor":
        return "write a checkpoint (if the loop checks checkpoint_requested)"
    return "write a checkpoint"


def _run_started(run_dir: Path) -> dict | None:
    """The run's RunStarted event (the first line of its events.jsonl), None when it cannot be read."""
    import json

    try:
        with open(run_dir / "events.jsonl", encoding="utf-8") as f:
            started = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return started if isinstance(started, dict) and started.get("event") == "RunStarted" else None


def _frames(run_dir: Path, args: argparse.Namespace) -> int:
    """`watch --frames FILE`: the dashboard drawn to FILE about once a second until the run ends."""
    from .dashboard.themes import ThemeError, resolve_theme

    cols, _, rows = args.size.partition("x")
    if not (cols.isdigit() and rows.isdigit() and int(cols) >= 40 and int(rows) >= 12):
        return _error(f"--size: expected COLSxROWS such as 120x40 (at least 40x12), got {args.size!r}")
    try:
        theme = resolve_theme(args.theme, Path.cwd()) if args.theme else None
    except ThemeError as e:
        return _error(f"--theme: {e}")
    from .dashboard.frames import run_frames

    return run_frames(run_dir, Path(args.frames), theme, (int(cols), int(rows)))


#: a tuitrain run's own files: given one, `watch` and `serve` show its run
RUN_FILES = ("events.jsonl", "run.json")
#: the tools whose runs `watch`, `ls` and `serve` find, as an error names them
TOOLS = "tuitrain, TensorBoard, Lightning CSVLogger, MLflow, trackio, W&B"


def _watched(paths: list[str]) -> tuple[list, str] | int:
    """The runs that `watch` and `serve` show (`RunRef`s, tuitrain/sources/refs.py): each path a run of
    any tool, or a folder of runs (all of them, nested ones too: an experiment folder's runs newest first);
    and a line naming the extras their readers miss ("" when none). A path with no run: one line, exit 2."""
    from .sources import registry

    # a file of a tuitrain run (`watch RUN/events.jsonl`): that run
    paths = [str(Path(p).parent) if Path(p).name in RUN_FILES and Path(p).is_file() else p for p in paths]
    found = registry.find(paths)
    for line in found.unreadable:
        print(f"tuitrain: {line}", file=sys.stderr)
    for path in found.empty:
        if not Path(path).exists():
            return _error(f"{path}: no such file or folder")
        return _error(f"{path}: not a run directory (no events.jsonl) and no runs under it (of {TOOLS})")
    return found.runs, " · ".join(found.missing)


def _watched_runs(paths: list[str]) -> list | int:
    """`_watched`'s runs alone."""
    got = _watched(paths)
    return got if isinstance(got, int) else got[0]


def _theme(args: argparse.Namespace) -> Path | None | int:
    from .dashboard.themes import ThemeError, resolve_theme

    if not args.theme:
        return None
    try:
        return resolve_theme(args.theme, Path.cwd())
    except ThemeError as e:
        return _error(f"--theme: {e}")


def cmd_watch(args: argparse.Namespace) -> int:
    if args.frames:  # a notebook's picture of its own run, which may not have written anything yet
        return _frames(Path(args.run_dirs[0]), args)
    from .sources import registry
    from .sources.sweep_files import is_sweep_dir

    sweep = Path(args.run_dirs[0]) if len(args.run_dirs) == 1 and is_sweep_dir(args.run_dirs[0]) else None
    got = ([], "") if sweep is not None else _watched(args.run_dirs)  # a sweep may have no trial yet
    if isinstance(got, int):
        return got
    runs, note = got
    if not sys.stdout.isatty():
        if sweep is not None:
            plain = f"{sweep}/trial-NNNN.out"
        elif registry.is_own(runs[0]):
            plain = f"{runs[0].path / 'experiment.log'} (tail -f) or events.jsonl"
        else:
            plain = "`tuitrain ls PATH` for the runs' list"
        return _error(f"watch shows the dashboard and needs a terminal; for plain lines read {plain}")
    theme = _theme(args)
    if isinstance(theme, int):
        return theme
    if sweep is not None:  # the trials compared, new ones joining as they start
        from .dashboard.entry import run_sweep_watch

        return run_sweep_watch(sweep, theme)
    if len(runs) > 1:  # runs of any tools compared
        from .dashboard.entry import run_compare

        return run_compare(runs, theme, note)
    from .dashboard.entry import run_watch

    if registry.is_own(runs[0]):
        return run_watch(runs[0].path, theme, owned=args.owned)
    return run_watch(runs[0], theme, note=note)


def cmd_serve(args: argparse.Namespace) -> int:
    from .sources.sweep_files import is_sweep_dir

    sweep = Path(args.run_dirs[0]) if len(args.run_dirs) == 1 and is_sweep_dir(args.run_dirs[0]) else None
    got = ([], "") if sweep is not None else _watched(args.run_dirs)  # a sweep may have no trial yet
    if isinstance(got, int):
        return got
    theme = _theme(args)
    if isinstance(theme, int):
        return theme
    import importlib.util

    if importlib.util.find_spec("textual_serve") is None:
        return _error("serve needs textual-serve: pip install 'tuitrain[serve]'")
    from .dashboard.serve import ServeError, serve

    try:  # each tab's viewer finds the runs of these paths as `watch` does
        return serve([Path(p) for p in args.run_dirs], theme, host=args.host, port=args.port)
    except ServeError as e:
        return _error(str(e))


def cmd_sweep(args: argparse.Namespace) -> int:
    from .run.sweep_command import sweep_command

    headless = args.headless or not sys.stdout.isatty()
    return sweep_command(args.config, args.overrides, args.trials, args.parallel, args.storage, _error, headless)


def cmd_lr_find(args: argparse.Namespace) -> int:
    from .run.lr_find import lr_find_command

    return lr_find_command(args)


def cmd_ls(args: argparse.Namespace) -> int:
    from .run.directories import format_runs, list_runs

    root = Path(args.dir)
    if root.suffix == ".toml" and not root.is_dir():  # a config: its experiment's folder, as `run` makes it
        from .config import ConfigError, load_config

        try:
            cfg = load_config(root)
        except ConfigError as e:
            return _error(str(e))
        root = Path(cfg.experiment.dir) / cfg.experiment.name
        if not root.exists():
            print(f"no runs of {args.dir} yet: {root} does not exist")
            return 0
    elif not root.exists():
        return _error(f"{args.dir}: no such folder")
    rows = list_runs(root)  # tuitrain's runs and every other tool's (a file: an MLflow or trackio database)
    if not rows:
        print(f"no runs under {root}")
        return 0
    print(format_runs(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command in ("stop", "checkpoint"):
            return cmd_control(args, args.command)
        if args.command == "watch":
            return cmd_watch(args)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "ls":
            return cmd_ls(args)
        if args.command == "sweep":
            return cmd_sweep(args)
        if args.command == "lr-find":
            return cmd_lr_find(args)
    except KeyboardInterrupt:
        return 130
    return _error(f"unknown command {args.command}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
