"""`tuitrain watch` at scale: how long a finished run of 100k and 1M logged steps takes to be shown
whole, the viewer's peak RSS, how fast a live run is followed, and TensorBoard's EventAccumulator on
the same scalars when tensorboard is installed.

    python benchmarks/bench_watch.py [--rounds 3] [--steps 100000,1000000] [--skip app,events,live,tb]
                                     [--terminal PAIRS [--base OTHER_TREE]]

The runs are written once into a temp dir (events.jsonl as JsonlWriter writes it: 4 train metrics a
step, valid metrics and EpochCompleted every 10,000 steps, a device sample every 1,000 steps, one
loss spike). Every measurement runs in a fresh process, in rounds, the variants interleaved:
- `model`: FileSource -> DashboardState, no screen (the reading and folding alone), reading the
  numbers from events.columns (the side file JsonlWriter writes);
- `model json`: the same without the side file (`FileSource(columns=False)`: a run written before it,
  or by another writer): MetricsBlocks decoded from the JSON;
- `app`: the real DashboardApp under `run_test` at 120x40, until the run's last step is folded,
  the bridge is empty and the loss chart has drawn its points;
- `events`: the model fed one event per line (`FileSource(blocks=False)`: the general path, what
  every line took before the MetricsBlock fast path), 100k steps only (it takes ~25 µs a line);
- `live`: a writer process appends the 1M run's lines at a fixed rate; the follower's lag at the end.
Wall time and the process's CPU time (user+sys) are printed: on a shared machine the CPU time is
the steadier figure. Medians over rounds, with min-max.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PER_EPOCH = 10_000
METRICS = ("loss", "accuracy", "lr", "grad_norm")


def write_run(
    run_dir: Path, steps: int, spike_at: int | None = None, devices_every: int = 1000, batch: int = 250
) -> Path:
    """A finished run of `steps` logged training steps, written by the run's JsonlWriter (events.jsonl
    and events.columns), in batches of `batch` events as an EventBus hands them over."""
    from tuitrain.core.events import (
        DevicesSampled,
        EpochCompleted,
        EpochStarted,
        MetricsLogged,
        PhaseStarted,
        RunFinished,
        RunStarted,
    )
    from tuitrain.sinks.jsonl import JsonlWriter

    run_dir.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(0)
    t0 = t = 1_700_000_000.0
    epochs = -(-steps // PER_EPOCH)
    spike_at = spike_at or steps // 3
    writer = JsonlWriter(run_dir, flush_interval=1e9, background=False)
    count = 0
    try:

        def w(e):
            nonlocal count
            writer(e)
            count += 1
            if count % batch == 0:
                writer.end_batch()

        w(
            RunStarted(
                run_dir=str(run_dir),
                experiment="bench",
                epochs=epochs,
                max_steps=0,
                steps_per_epoch=PER_EPOCH,
                batch_size=64,
                config={"checkpoint": {"monitor": "valid/loss", "mode": "min"}},
                time=t,
            )
        )
        step = 0
        for epoch in range(1, epochs + 1):
            w(EpochStarted(epoch=epoch, epochs=epochs, step=step, time=t))
            w(PhaseStarted(phase="train", split="train", epoch=epoch, step=step, batches=PER_EPOCH, time=t))
            for b in range(min(PER_EPOCH, steps - step)):
                step += 1
                t += 0.01
                loss = 1000.0 if step == spike_at else 2.0 / (1 + step / 1000) + rnd.random() * 0.05
                w(
                    MetricsLogged(
                        split="train",
                        epoch=epoch,
                        step=step,
                        batch=b + 1,
                        batches=PER_EPOCH,
                        time=t,
                        metrics={
                            "loss": loss,
                            "accuracy": 1 - loss / 4,
                            "lr": 3e-3 * (1 - step / steps),
                            "grad_norm": rnd.random() * 3,
                        },
                    )
                )
                if step % devices_every == 0:
                    w(
                        DevicesSampled(
                            cpu=50 + rnd.random() * 40,
                            cpu_per_core=[50.0, 60.0],
                            memory=40.0,
                            memory_used=6 << 30,
                            memory_total=16 << 30,
                            rss=(1 << 30) + step,
                            time=t,
                            gpus=[
                                {"index": 0, "name": "Fake", "util": 90.0, "mem_used": 30 << 30, "mem_total": 80 << 30}
                            ],
                        )
                    )
            vloss = 2.4 / (1 + step / 1000)
            w(
                MetricsLogged(
                    split="valid",
                    epoch=epoch,
                    step=step,
                    scope="epoch",
                    batch=10,
                    batches=10,
                    time=t,
                    metrics={"loss": vloss, "accuracy": 1 - vloss / 4},
                )
            )
            w(
                EpochCompleted(
                    epoch=epoch,
                    epochs=epochs,
                    step=step,
                    duration=100.0,
                    time=t,
                    metrics={"train/loss": loss, "valid/loss": vloss},
                )
            )
        w(
            RunFinished(
                status="completed",
                exit_code=0,
                epoch=epochs,
                step=step,
                reason="epochs",
                duration=t - t0,
                summary={},
                best={},
                time=t,
            )
        )
    finally:
        writer.close()
    return run_dir


# --- what each child process measures (it prints one JSON line) ------------------------------------


def _usage() -> dict:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r.ru_utime + r.ru_stime, "rss_mb": r.ru_maxrss / 1024}


def child_model(run_dir: str, how: str) -> dict:
    import threading

    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.sources.run_files import FileSource

    before = _usage()
    t0 = time.perf_counter()
    state, src, pending = (
        DashboardState(),
        FileSource(Path(run_dir), blocks=how != "events", columns=how == "blocks"),
        [],
    )
    lock = threading.Lock()

    def emit(e, s=None):
        with lock:
            pending.append(e)

    src.open(emit)
    src.backlog = lambda: len(pending)  # as the app's bridge: the reader waits while the screen is behind
    worker = threading.Thread(target=src.work, daemon=True)
    worker.start()
    while True:  # the app's drain, without its 1/15 s tick
        with lock:
            batch, pending[:] = pending[:], []
        if batch:
            state.apply(batch)
        elif src.caught_up and not pending:
            break
        else:
            time.sleep(0.002)
    wall = time.perf_counter() - t0
    src.close()
    worker.join(2)
    after = _usage()
    loss = state.metric_series("loss", "train")
    xs, ys = loss.points()
    return {
        "wall": wall,
        "cpu": after["cpu"] - before["cpu"],
        "rss_mb": after["rss_mb"],
        "step": state.step,
        "spike_shown": max(ys) == 1000.0,
        "points": len(xs),
    }


def child_app(run_dir: str) -> dict:
    import asyncio

    from tuitrain.dashboard.app import DashboardApp
    from tuitrain.sources.run_files import FileSource

    before = _usage()

    async def main() -> float:
        t0 = time.perf_counter()
        app = DashboardApp(FileSource(Path(run_dir)), None, watch=True, notice="finished run")
        async with app.run_test(size=(120, 40)) as pilot:
            while True:
                await pilot.pause(0.02)
                st = app.state
                charts = [c for c in app.query("MetricPlot") if getattr(c, "metric", "") == "loss"]
                drawn = charts and charts[0].points.get("train", ([], []))[0]
                if st.final and app.source.caught_up and not app.bridge.pending() and drawn and drawn[-1] >= st.step:
                    wall = time.perf_counter() - t0
                    ys = charts[0].points["train"][1]
                    return wall, max(ys) == 1000.0

    wall, spike = asyncio.run(main())
    after = _usage()
    return {"wall": wall, "cpu": after["cpu"] - before["cpu"], "rss_mb": after["rss_mb"], "spike_shown": spike}


def child_live(run_dir: str, source: str, rate: float, seconds: float) -> dict:
    """Follow `run_dir`/events.jsonl while a writer process appends `source`'s lines at `rate` a second."""
    import threading

    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.sources.run_files import FileSource

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "events.jsonl").write_bytes(b"")
    writer = subprocess.Popen([sys.executable, __file__, "--child", "writer", run_dir, source, str(rate), str(seconds)])
    state, src, pending = DashboardState(), FileSource(Path(run_dir), poll=0.05), []
    lock = threading.Lock()
    src.open(lambda e, s=None: (lock.acquire(), pending.append(e), lock.release()))
    src.backlog = lambda: len(pending)
    worker = threading.Thread(target=src.work, daemon=True)
    worker.start()
    before = _usage()
    written = None
    while written is None or state.step < written:
        with lock:
            batch, pending[:] = pending[:], []
        if batch:
            state.apply(batch)
        else:
            time.sleep(0.01)
        if written is None and writer.poll() is not None:
            written = int((Path(run_dir) / "done").read_text())
    lag_end = time.perf_counter()
    src.close()
    after = _usage()
    return {
        "written": written,
        "folded_step": state.step,
        "lines": src.lines_read,
        "cpu": after["cpu"] - before["cpu"],
        "rate_target": rate,
        "caught_up_after_s": lag_end - float((Path(run_dir) / "done_at").read_text()),
    }


def child_writer(run_dir: str, source: str, rate: float, seconds: float) -> None:
    lines = Path(source, "events.jsonl").read_bytes().split(b"\n")[: int(rate * seconds)]
    out = open(Path(run_dir) / "events.jsonl", "ab", buffering=0)
    t0, i, tick = time.perf_counter(), 0, 0.05
    while i < len(lines):
        due = min(len(lines), int((time.perf_counter() - t0 + tick) * rate))
        if due > i:
            out.write(b"\n".join(lines[i:due]) + b"\n")
            i = due
        time.sleep(tick)
    out.close()
    last_step = max(json.loads(l).get("step", 0) for l in lines[-3000:] if l)
    Path(run_dir, "done").write_text(str(last_step))
    Path(run_dir, "done_at").write_text(repr(time.perf_counter()))


def child_tensorboard(log_dir: str) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    before = _usage()
    t0 = time.perf_counter()
    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    n = sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])
    after = _usage()
    return {
        "wall": time.perf_counter() - t0,
        "cpu": after["cpu"] - before["cpu"],
        "rss_mb": after["rss_mb"],
        "scalars": n,
    }


def write_tensorboard(run_dir: Path, log_dir: Path) -> None:
    """The same train scalars as a TensorBoard event file (tensorboard's own writer)."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.compat.proto import event_pb2, summary_pb2

    writer = EventFileWriter(str(log_dir))
    with open(run_dir / "events.jsonl", "rb") as f:
        for line in f:
            d = json.loads(line)
            if d.get("event") != "MetricsLogged":
                continue
            values = [
                summary_pb2.Summary.Value(tag=f"{d['split']}/{k}", simple_value=v) for k, v in d["metrics"].items()
            ]
            writer.add_event(
                event_pb2.Event(wall_time=d["time"], step=d["step"], summary=summary_pb2.Summary(value=values))
            )
    writer.close()


def terminal_open(run_dir: Path, tree: Path, timeout: float = 60.0) -> float:
    """Seconds from starting `python -m tuitrain watch RUN` (the tuitrain of `tree`) in a 120x40 tmux
    pane to the screen showing the run whole ("Training completed", which comes once the whole file is
    read and drawn), polled every 30 ms: the whole process, Python's and Textual's start included."""
    session = f"bench-watch-{os.getpid()}"
    cmd = f"PYTHONPATH={tree} {sys.executable} -m tuitrain watch {run_dir}"
    t0 = time.perf_counter()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", "-c", str(tree), cmd], check=True
    )  # started in the tree: `python -m` looks there first
    try:
        while time.perf_counter() - t0 < timeout:
            shown = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True)
            if "Training completed" in shown.stdout:
                return time.perf_counter() - t0
            time.sleep(0.03)
        raise RuntimeError(f"{run_dir}: not shown whole within {timeout} s")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


# --- the parent: rounds, interleaved -----------------------------------------------------------


def run_child(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env, timeout=900
    )
    if out.returncode != 0:
        raise RuntimeError(f"{args}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(values: list[float], unit: str = "s") -> str:
    return f"{statistics.median(values):.2f} {unit} ({min(values):.2f}-{max(values):.2f})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", default="100000,1000000")
    p.add_argument("--skip", default="", help="comma-separated: app, json, events, live, tb")
    p.add_argument("--dir", default="", help="where to write the runs (default: a temp dir)")
    p.add_argument(
        "--terminal",
        type=int,
        default=0,
        metavar="PAIRS",
        help="also time `tuitrain watch` of the biggest run in tmux, PAIRS times (with --base: in turn)",
    )
    p.add_argument("--base", default="", help="another tuitrain tree (a git worktree) to time beside this one")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        kind, *rest = a.child
        if kind == "writer":
            child_writer(rest[0], rest[1], float(rest[2]), float(rest[3]))
            return 0
        result = {
            "model": lambda: child_model(rest[0], rest[1]),
            "app": lambda: child_app(rest[0]),
            "live": lambda: child_live(rest[0], rest[1], float(rest[2]), float(rest[3])),
            "tb": lambda: child_tensorboard(rest[0]),
        }[kind]()
        print(json.dumps(result))
        return 0
    skip = set(filter(None, a.skip.split(",")))
    sizes = [int(s) for s in a.steps.split(",")]
    tmp = Path(a.dir or tempfile.mkdtemp(prefix="bench_watch-"))
    runs = {}
    for n in sizes:
        run = tmp / f"run-{n}"
        if not (run / "events.jsonl").exists():
            t0 = time.perf_counter()
            write_run(run, n)
            print(
                f"wrote {run} ({(run / 'events.jsonl').stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.0f} s"
            )
        runs[n] = run
    try:
        import tensorboard  # noqa: F401

        has_tb = "tb" not in skip
    except ImportError:
        has_tb = False
        print("tensorboard is not installed: its EventAccumulator is left out (pip install tensorboard)")
    if has_tb:
        for n, run in runs.items():
            if not (run / "tb").exists():
                write_tensorboard(run, run / "tb")
    print(f"load average before: {os.getloadavg()}")
    results: dict[tuple, list[dict]] = {}
    for r in range(a.rounds):
        for n, run in runs.items():
            plan = [("model", str(run), "blocks"), ("model", str(run), "json")]
            if "json" in skip:
                plan.pop()
            if "app" not in skip:
                plan.append(("app", str(run)))
            if "events" not in skip and n <= 100_000:
                plan.append(("model", str(run), "events"))
            if has_tb:
                plan.append(("tb", str(run / "tb")))
            if r % 2:
                plan.reverse()  # who goes first alternates
            for args in plan:
                res = run_child(*args)
                results.setdefault((n, *args[:1], *args[2:]), []).append(res)
                print(f"round {r + 1} {n:>8} steps {' '.join(args[:1] + args[2:]):<14} {json.dumps(res)}", flush=True)
    if "live" not in skip:
        big = runs[max(runs)]
        for rate in (100_000, 200_000):
            res = run_child("live", str(tmp / f"live-{rate}"), str(big), str(rate), "5")
            results.setdefault(("live", rate), []).append(res)
            print(f"live follow at {rate} lines/s for 5 s: {json.dumps(res)}", flush=True)
    if a.terminal:
        big, trees = runs[max(runs)], [("this tree", ROOT)] + ([("base", Path(a.base))] if a.base else [])
        for i in range(a.terminal):
            for name, tree in trees if i % 2 == 0 else trees[::-1]:  # who goes first alternates
                secs = terminal_open(big, tree)
                results.setdefault((max(runs), f"terminal, {name}"), []).append({"wall": secs})
                print(f"pair {i + 1} tuitrain watch in tmux, {name}: {secs:.2f} s", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print("\n| run | what | wall, median (min-max) | CPU time | peak RSS |")
    print("| --- | --- | --- | --- | --- |")
    for key, rows in results.items():
        if key[0] == "live":
            continue
        n, what = key[0], " ".join(key[1:])
        cpu = summary([x["cpu"] for x in rows]) if "cpu" in rows[0] else ""
        rss = summary([x["rss_mb"] for x in rows], "MB") if "rss_mb" in rows[0] else ""
        print(f"| {n:,} steps | {what} | {summary([x['wall'] for x in rows])} | {cpu} | {rss} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
