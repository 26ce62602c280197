"""The loop's stall per checkpoint against the time to copy the training state to CPU memory.

Every step's duration is recorded; a checkpoint's stall is the extra time of the steps from the one
that took it to the one that saw its background write finish, over the median of the other steps
(so a write that slows training while it runs counts too). The background writer should keep it close to the
in-memory copy (`snapshot`) alone. Target: <= 1.2x.

    python benchmarks/bench_checkpoint.py [--hidden 2048] [--steps 300] [--every 50] [--repeats 3]
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

import torch
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuitrain.core.checkpoint import Checkpointer  # noqa: E402
from tuitrain.core.events import CheckpointSaved, CheckpointStarted, StepCompleted  # noqa: E402
from tuitrain.core.learner import CoreLearner  # noqa: E402


def build(hidden: int, steps: int, batch: int = 64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch * steps, 784, generator=g)
    y = torch.randint(0, 10, (batch * steps,), generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10)
    )
    return model, TensorDataset(x, y), batch


def timed_run(hidden: int, steps: int, every: int) -> tuple[list[float], list[float], int]:
    """(stall of each checkpoint, stalls reported by the learner, bytes per checkpoint)"""
    model, ds, batch = build(hidden, steps)
    times, started, saved, reported, sizes = {}, [], [], [], []

    def clock(event, state):
        if isinstance(event, StepCompleted) and event.phase == "train":
            times[event.step] = time.perf_counter()
        elif isinstance(event, CheckpointStarted) and event.reason == "step":
            started.append(event.step)
        elif isinstance(event, CheckpointSaved) and event.reason == "step":
            saved.append(state.step)  # the step at which the loop learned the write was done
            reported.append(event.stall)
            sizes.append(event.bytes)

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Checkpointer(Path(tmp), every_n_steps=every, every_n_epochs=0, keep_last=1, keep_best=0)
        learner = CoreLearner(
            model,
            torch.optim.AdamW(model.parameters(), lr=1e-4),
            loss_fn=nn.CrossEntropyLoss(),
            train_metrics=["loss"],
            valid_metrics=[],
            epochs=1,
            batch_size=batch,
            seed=0,
            device="cpu",
            log_every_n_steps=10,
            callbacks=[clock],
            checkpoint=ckpt,
        )
        assert learner.fit(ds).exit_code == 0
    dts = {s: times[s] - times[s - 1] for s in times if s - 1 in times}
    busy = {s for a, b in zip(started, saved) for s in range(a + 1, b + 2)}
    typical = statistics.median(dt for s, dt in dts.items() if s not in busy)
    # the steps' excess over the typical step, summed as it is: clipping each at zero would count
    # every step's own noise as stall (a write taking ten steps would gain ~10 noise excesses)
    stalls = [sum(dts[s] - typical for s in range(a + 1, b + 2) if s in dts) for a, b in zip(started, saved)]
    return stalls, reported, (sizes[0] if sizes else 0)


COPY = """
import json, statistics, sys, time, torch
sys.path.insert(0, {here!r})
torch.set_num_threads({threads})
from bench_checkpoint import build
from tuitrain.core.checkpoint import snapshot
model, _, _ = build({hidden}, 1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
model(torch.randn(2, 784)).sum().backward()
opt.step()  # the optimizer state exists, as in training
state = lambda: {{"model": model.state_dict(), "optimizers": [opt.state_dict()]}}
fresh, kept = [], []
for _ in range(5):  # each copy kept: every one lands in memory new to the process
    t0 = time.perf_counter()
    kept.append(snapshot(state()))
    fresh.append(time.perf_counter() - t0)
warm = []
for _ in range(5):  # into the memory of an earlier copy
    t0 = time.perf_counter()
    snapshot(state(), kept[0])
    warm.append(time.perf_counter() - t0)
print(json.dumps([statistics.median(fresh), statistics.median(warm)]))
"""


def copy_times(hidden: int, threads: int = 1) -> tuple[float, float]:
    """(a CPU copy of the state into new memory, the same into memory the process already uses), in
    a fresh process: in a long-lived one, a copy may or may not land in memory freed earlier (3 to
    15 ms for 70 MB on this machine kind), as the C library's allocator decides."""
    code = COPY.format(here=str(Path(__file__).resolve().parent), threads=threads, hidden=hidden)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]),
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    fresh, warm = json.loads(out.stdout.strip().splitlines()[-1])
    return fresh, warm


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    stalls, reported, size = [], [], 0
    for _ in range(args.repeats):
        st, rep, size = timed_run(args.hidden, args.steps, args.every)
        stalls += st
        reported += rep
    copy, warm = copy_times(args.hidden, args.threads)
    stall = statistics.median(stalls)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s); MLP 784-{args.hidden}-{args.hidden}-10 + AdamW, "
        f"checkpoint {size / 1e6:.1f} MB every {args.every} steps, {len(stalls)} checkpoints"
    )
    print(f"copy of the state to CPU memory : {copy * 1e3:8.1f} ms  (into memory already in use: {warm * 1e3:.1f} ms)")
    print(f"loop stall per checkpoint        : {stall * 1e3:8.1f} ms  ({stall / copy:.2f}x the copy; target <= 1.2x)")
    print(f"copy time the learner reports    : {statistics.median(reported) * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
