"""Memory growth over a million logged steps, and the time to the first step.

Part 1 feeds one million step-scope MetricsLogged events (and as many StepCompleted) through the
event bus into everything that consumes them in a real run: the run-directory sinks, the headless
console, and the dashboard's bridge and state (plot series included, without a screen). RSS is read
before and after. Target: <= 40 MB growth.

Part 2 times `tuitrain --help` and, for `tuitrain run` on a tiny config, the time from the command's
start to the first logged step.

    python benchmarks/bench_memory.py [--steps 1000000]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tuitrain.core.callbacks import EventBus  # noqa: E402
from tuitrain.core.events import (
    EpochStarted,
    MetricsLogged,
    PhaseStarted,
    RunStarted,  # noqa: E402
    StepCompleted,
)
from tuitrain.dashboard.state.bridge import EventBridge  # noqa: E402
from tuitrain.dashboard.state.model import DashboardState  # noqa: E402
from tuitrain.sinks.console import HeadlessConsole  # noqa: E402
from tuitrain.sinks.standard import standard_sinks  # noqa: E402


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def memory_growth(steps: int) -> tuple[int, int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        bus = EventBus()
        for sink in standard_sinks(Path(tmp)):
            bus.subscribe(sink, steps=False)
        bus.subscribe(HeadlessConsole(stream=io.StringIO(), err=io.StringIO()), steps=False)
        bridge, state = EventBridge(), DashboardState()
        bus.subscribe(bridge, steps=True)
        per_epoch = 100_000
        bus.emit(
            RunStarted(
                run_dir=tmp,
                experiment="mem",
                epochs=steps // per_epoch,
                max_steps=0,
                steps_per_epoch=per_epoch,
                batch_size=32,
            )
        )
        warm = 10_000
        t0 = time.perf_counter()
        before = 0
        for step in range(1, steps + 1):
            if step % per_epoch == 1:
                epoch = step // per_epoch + 1
                bus.emit(EpochStarted(epoch=epoch, epochs=steps // per_epoch, step=step - 1))
                bus.emit(PhaseStarted(phase="train", split="train", epoch=epoch, step=step - 1, batches=per_epoch))
            bus.emit_step(StepCompleted(phase="train", epoch=epoch, step=step, batch=step, items=32))
            bus.emit(
                MetricsLogged(
                    split="train",
                    epoch=epoch,
                    step=step,
                    metrics={"loss": 1.0 / step, "lr": 1e-3},
                    batch=step % per_epoch,
                    batches=per_epoch,
                )
            )
            if step % 1000 == 0:
                state.apply(bridge.drain())  # as the screen would, 15 times a second
            if step == warm:
                before = rss()  # after the first allocations settle
        state.apply(bridge.drain())
        after = rss()
        bus.close()
        return before, after, time.perf_counter() - t0


def first_step(tmp: Path) -> tuple[float, float]:
    cfg = tmp / "tiny.toml"
    cfg.write_text(f"""
[experiment]
name = "first"
dir = "{(tmp / "runs").as_posix()}"
[model]
target = "benchproj:Net"
[data]
target = "benchproj:datasets"
n = 3200
[train]
epochs = 1
[metrics]
train = ["loss"]
valid = []
[log]
every_n_steps = 1
[checkpoint]
monitor = "train/loss"
""")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE)]), OMP_NUM_THREADS="1")
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "tuitrain", "--help"], env=env, capture_output=True, check=True)
    help_s = time.time() - t0
    run_dir = tmp / "run"
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", str(cfg), "--headless", "--run-dir", str(run_dir)],
        env=env,
        capture_output=True,
        check=True,
    )
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "MetricsLogged":
            return help_s, e["time"] - t0
    raise RuntimeError("no step logged")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    before, after, secs = memory_growth(args.steps)
    print(
        f"{args.steps:,} logged steps through sinks, console and dashboard state in {secs:.0f} s: "
        f"RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB, growth {(after - before) / 2**20:+.1f} MiB "
        f"(target <= 40 MB)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        help_s, first = first_step(Path(tmp))
    print(f"`tuitrain --help`: {help_s:.2f} s (target < 0.3 s); `tuitrain run` to its first logged step: {first:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
