"""Per-step time of tuitrain DDP (`tuitrain run --set train.strategy=ddp --set train.devices=2`) against a
hand-written DDP script (mp spawn, gloo, DistributedSampler, DDP) on the same model, data and batch.

Both run 2 gloo ranks on CPU with one thread each; runs alternate and the median of the repeats is
reported. Time is taken between two logged steps after a warm-up, so process start, setup and the
final checkpoint are left out of both. tuitrain's time comes from its own events.jsonl timestamps.
`--sync-every K` also times tuitrain with its control-flag broadcast every K steps instead of every
step (TUITRAIN_DDP_SYNC_EVERY), which shows what that broadcast costs.

    python benchmarks/bench_ddp.py [--steps 600] [--repeats 3] [--model tiny|medium|both] [--sync-every 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dashboard import allocator_env  # noqa: E402

MODELS = {"tiny": (32, 64, 10, 32), "medium": (784, 1024, 10, 128)}  # in, hidden, out, batch per rank
WARMUP = 100
WORLD = 2
LOG_EVERY = 10

PROJECT = """
import torch
from torch import nn
from torch.utils.data import TensorDataset


def model(d_in, hidden, d_out):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def datasets(n, d_in, d_out):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, d_in, generator=g), torch.randint(0, d_out, (n,), generator=g)), None
"""

CONFIG = """
[experiment]
name = "bench"
dir = "runs"
seed = 0

[model]
target = "benchproj:model"
d_in = {d_in}
hidden = {hidden}
d_out = {d_out}

[data]
target = "benchproj:datasets"
batch_size = {batch}
shuffle = true
n = {n}
d_in = {d_in}
d_out = {d_out}

[loss]
target = "torch.nn:CrossEntropyLoss"

[optimizer]
name = "AdamW"
lr = 1e-3

[train]
epochs = 1
device = "cpu"
strategy = "ddp"
devices = {world}

[metrics]
train = ["loss"]
valid = ["loss"]

[log]
every_n_steps = {log_every}

[checkpoint]
every_n_epochs = 0
"""

HAND = r"""
import datetime, os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
sys.path.insert(0, sys.argv[1])
import benchproj

d_in, hidden, d_out, batch, n, warmup, port = map(int, sys.argv[2:9])


def rank_main(rank, world):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    model = DDP(benchproj.model(d_in, hidden, d_out))
    train, _ = benchproj.datasets(n, d_in, d_out)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=batch, sampler=sampler)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    t0 = None
    i = 0
    for i, (x, y) in enumerate(loader, start=1):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i % 10 == 0:
            loss.item()  # what a hand-written loop prints now and then
        if i == warmup:
            t0 = time.perf_counter()
    if rank == 0:
        print((time.perf_counter() - t0) / (i - warmup))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank_main, args=(2,), nprocs=2)
"""


def _env(sync_every: int = 0) -> dict:
    """Both scripts' ranks with glibc's malloc keeping freed memory, as tuitrain's ranks set it for
    themselves (see bench_dashboard.allocator_env): the ratio is the loops' own cost."""
    env = allocator_env(dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT)))
    env.pop("TUITRAIN_DDP_SYNC_EVERY", None)
    if sync_every:
        env["TUITRAIN_DDP_SYNC_EVERY"] = str(sync_every)
    return env


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tuitrain_step(folder: Path, kind: str, steps: int, sync_every: int = 0) -> float:
    d_in, hidden, d_out, batch = MODELS[kind]
    run = folder / f"run-{time.time_ns()}"
    cfg = folder / "bench.toml"
    cfg.write_text(
        CONFIG.format(
            d_in=d_in,
            hidden=hidden,
            d_out=d_out,
            batch=batch,
            n=batch * WORLD * steps,
            world=WORLD,
            log_every=LOG_EVERY,
        )
    )
    subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", str(cfg), "--run-dir", str(run)],
        cwd=folder,
        env=_env(sync_every),
        check=True,
        capture_output=True,
    )
    times = {}
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "MetricsLogged" and e["split"] == "train" and e["scope"] == "step":
            times[e["step"]] = e["time"]
    last = max(times)
    return (times[last] - times[WARMUP]) / (last - WARMUP)


def hand_step(folder: Path, kind: str, steps: int) -> float:
    d_in, hidden, d_out, batch = MODELS[kind]
    script = folder / "hand_ddp.py"
    script.write_text(HAND)
    for attempt in range(3):  # a free port found by bind() can be taken again before gloo binds it
        out = subprocess.run(
            [
                sys.executable,
                str(script),
                str(folder),
                str(d_in),
                str(hidden),
                str(d_out),
                str(batch),
                str(batch * WORLD * steps),
                str(WARMUP),
                str(_free_port()),
            ],
            cwd=folder,
            env=_env(),
            capture_output=True,
            text=True,
        )
        if out.returncode == 0:
            return float(out.stdout.strip().splitlines()[-1])
    raise RuntimeError(f"the hand-written DDP script failed 3 times:\n{out.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", choices=["tiny", "medium", "both"], default="both")
    ap.add_argument("--sync-every", type=int, default=0, help="also time tuitrain syncing control every K steps")
    args = ap.parse_args()
    kinds = ["tiny", "medium"] if args.model == "both" else [args.model]
    print(
        f"{WORLD} gloo ranks on CPU, 1 thread each, {args.steps} steps per run (timed after {WARMUP}), "
        f"median of {args.repeats}; torch {__import__('torch').__version__}, {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "benchproj.py").write_text(PROJECT)
        for kind in kinds:
            tt, hh, ss = [], [], []
            for _ in range(args.repeats):
                tt.append(tuitrain_step(folder, kind, args.steps))
                hh.append(hand_step(folder, kind, args.steps))
                if args.sync_every:
                    ss.append(tuitrain_step(folder, kind, args.steps, args.sync_every))
            t, h = statistics.median(tt), statistics.median(hh)
            d_in, hidden, d_out, batch = MODELS[kind]
            line = (
                f"{kind:6s} ({d_in}-{hidden}-{d_out}, batch {batch}/rank): hand-written DDP {h * 1e3:.3f} ms/step, "
                f"tuitrain DDP {t * 1e3:.3f} ms/step, ratio {t / h:.3f}"
            )
            if ss:
                s = statistics.median(ss)
                line += f"; tuitrain syncing every {args.sync_every} steps {s * 1e3:.3f} ms/step (ratio {s / h:.3f})"
            print(line)
            print(
                f"       runs: hand {[round(x * 1e3, 3) for x in hh]} tuitrain {[round(x * 1e3, 3) for x in tt]}"
                + (f" sync-every {[round(x * 1e3, 3) for x in ss]}" if ss else "")
            )


if __name__ == "__main__":
    main()
