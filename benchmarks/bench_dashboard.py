"""Per-step time with the dashboard live in a pseudo-terminal, against tuitrain headless and a
hand-written loop, each in its own process (one torch thread), interleaved, median of repeats.

Step times come from the event stream (MetricsLogged times between a warm-up step and the last step)
for tuitrain, and from the same two steps for the hand-written loop. The dashboard run is left with
`q` once run.json says it completed.

    python benchmarks/bench_dashboard.py [--steps 3000] [--repeats 3] [--model tiny|medium|both]
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tuitrain.core import heap  # noqa: E402

WARMUP = 200
MODELS = {"tiny": dict(d_in=32, hidden=64, batch=32), "medium": dict(d_in=784, hidden=1024, batch=128)}

CONFIG = """
[experiment]
name = "bench"
dir = "{runs}"
seed = 0

[model]
target = "benchproj:Net"
d_in = {d_in}
hidden = {hidden}

[data]
target = "benchproj:datasets"
batch_size = {batch}
n = {n}
d_in = {d_in}

[optimizer]
name = "AdamW"
lr = 1e-3

[train]
epochs = 1
device = "cpu"

[metrics]
train = ["loss"]
valid = []

[log]
every_n_steps = 10

[checkpoint]
every_n_epochs = 0
monitor = "train/loss"
"""

HAND = """
import sys, time, torch
sys.path.insert(0, {here!r})
from torch import nn
from torch.utils.data import DataLoader
import benchproj
torch.set_num_threads(1)
torch.manual_seed(0)
model = benchproj.Net(d_in={d_in}, hidden={hidden})
train, _ = benchproj.datasets(n={n}, d_in={d_in})
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
t0 = None
for i, (x, y) in enumerate({loader}, start=1):
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if i % 10 == 0:
        loss.item()
    if i == {warmup}:
        t0 = time.perf_counter()
print((time.perf_counter() - t0) / (i - {warmup}))
"""


# the hand-written loop's data loader: torch's item-by-item fetch (what a hand-written loop does), or
# the whole-batch fetch tuitrain uses for a TensorDataset (then the two differ by their loops alone)
LOADERS = {
    "item": "DataLoader(train, batch_size={batch}, shuffle=True)",
    "whole": "DataLoader(benchproj.WholeBatches(train), batch_size={batch}, shuffle=True, "
    "collate_fn=benchproj.whole_batch)",
}


def hand_code(steps: int, m: dict, warmup: int = WARMUP, fetch: str = "item") -> str:
    """The hand-written loop's script for `steps` steps of model size `m`, with the `fetch` loader."""
    return HAND.format(
        here=str(HERE), n=m["batch"] * steps, warmup=warmup, loader=LOADERS[fetch].format(batch=m["batch"]), **m
    )


def allocator_env(e: dict, glibc_defaults: bool = False) -> dict:
    """`e` with glibc's malloc given the thresholds `tuitrain run` sets for itself (tuitrain.core.heap),
    for the hand-written runs as much as tuitrain's, unless `glibc_defaults`: every loop compared keeps
    freed memory for its next step, and the ratios are the loops' own costs. (Seeing these variables,
    tuitrain leaves the allocator as they set it.)"""
    for k in heap.USER_KNOBS:
        e.pop(k, None)
    if not glibc_defaults:
        e["MALLOC_TRIM_THRESHOLD_"] = str(heap.TRIM_THRESHOLD)
        e["MALLOC_MMAP_THRESHOLD_"] = str(heap.MMAP_THRESHOLD)
    return e


def env(glibc_defaults: bool = False) -> dict:
    """The runs' environment: one torch thread, a 120x40 terminal, the allocator as `allocator_env`."""
    e = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TERM="xterm-256color", COLUMNS="120", LINES="40")
    e["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE)])
    return allocator_env(e, glibc_defaults)


def write_config(tmp: Path, steps: int, m: dict, name: str = "bench.toml", model: str = "benchproj:Net") -> Path:
    """The runs' config (CONFIG) in `tmp`, for `steps` steps of model size `m`, training `model`."""
    cfg = tmp / name
    cfg.write_text(
        CONFIG.format(runs=(tmp / "runs").as_posix(), n=m["batch"] * steps, **m).replace(
            '"benchproj:Net"', f'"{model}"'
        )
    )
    return cfg


def per_step_from_events(run_dir: Path, steps: int, warmup: int = WARMUP) -> float:
    marks = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "MetricsLogged" and e.get("scope") == "step" and e["step"] in (warmup, steps):
            marks[e["step"]] = e["time"]
    return (marks[steps] - marks[warmup]) / (steps - warmup)


def hand(steps: int, m: dict, warmup: int = WARMUP, glibc_defaults: bool = False, fetch: str = "item") -> float:
    out = subprocess.run(
        [sys.executable, "-c", hand_code(steps, m, warmup, fetch)],
        env=env(glibc_defaults),
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def tuitrain(steps: int, m: dict, tmp: Path, dashboard: bool, warmup: int = WARMUP) -> float:
    cfg = write_config(tmp, steps, m)
    run_dir = tmp / f"run-{time.time_ns()}"
    cmd = [sys.executable, "-m", "tuitrain", "run", str(cfg), "--run-dir", str(run_dir)]
    if not dashboard:
        subprocess.run(cmd + ["--headless"], env=env(), check=True, capture_output=True)
        return per_step_from_events(run_dir, steps, warmup)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the dashboard in a real pseudo-terminal
        os.execvpe(cmd[0], cmd, env())
    deadline = time.time() + 600
    while time.time() < deadline:  # drain the screen output, as a terminal would
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                os.read(fd, 65536)
            except OSError:
                break
        status = run_dir / "run.json"
        if status.exists() and json.loads(status.read_text() or "{}").get("status") == "completed":
            time.sleep(0.3)
            os.write(fd, b"q")
            break
    for _ in range(100):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        try:
            os.read(fd, 65536)
        except OSError:
            pass
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    os.close(fd)
    return per_step_from_events(run_dir, steps, warmup)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", choices=["tiny", "medium", "both"], default="both")
    args = ap.parse_args(argv)
    kinds = ["tiny", "medium"] if args.model == "both" else [args.model]
    print(f"1 torch thread, median of {args.repeats}; per-step time and ratio to the hand-written loop")
    for kind in kinds:
        m = MODELS[kind]
        steps = args.steps if kind == "tiny" else max(WARMUP + 200, args.steps // 5)
        res = {"hand-written": [], "headless": [], "dashboard": []}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeats):
                res["hand-written"].append(hand(steps, m))
                res["headless"].append(tuitrain(steps, m, Path(tmp), dashboard=False))
                res["dashboard"].append(tuitrain(steps, m, Path(tmp), dashboard=True))
        base = statistics.median(res["hand-written"])
        print(f"{kind}: MLP {m['d_in']}-{m['hidden']}-10, batch {m['batch']}, {steps} steps")
        for name, xs in res.items():
            med = statistics.median(xs)
            print(f"  {name:13} {med * 1e6:9.1f} µs/step  {med / base:6.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
