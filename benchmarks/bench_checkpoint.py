"""The loop's stall per checkpoint against the time to copy the training state to CPU memory.

The same training runs with and without a checkpoint every K steps (interleaved, median of several
repeats); the extra time divided by the number of checkpoints is the stall the loop pays, which the
background writer should keep close to the in-memory copy (`snapshot`) alone. Target: <= 1.2x.

    python benchmarks/bench_checkpoint.py [--hidden 2048] [--steps 300] [--every 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuitrain.core.checkpoint import Checkpointer, snapshot  # noqa: E402
from tuitrain.core.events import CheckpointSaved, MetricsLogged  # noqa: E402
from tuitrain.core.learner import Learner  # noqa: E402


def build(hidden: int, steps: int, batch: int = 64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch * steps, 784, generator=g)
    y = torch.randint(0, 10, (batch * steps,), generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 10))
    return model, TensorDataset(x, y), batch


def timed_run(hidden: int, steps: int, every: int) -> tuple[float, list[float], int]:
    """(seconds from step 10 to the last step, stalls reported by the learner, bytes per checkpoint)"""
    model, ds, batch = build(hidden, steps)
    marks, stalls, sizes = {}, [], []

    def clock(event, state):
        if isinstance(event, MetricsLogged) and event.scope == "step" and event.step in (10, steps):
            marks[event.step] = time.perf_counter()
        elif isinstance(event, CheckpointSaved) and event.reason == "step":
            stalls.append(event.stall)
            sizes.append(event.bytes)

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Checkpointer(Path(tmp), every_n_steps=every, every_n_epochs=0, keep_last=1, keep_best=0)
        learner = Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-4), loss_fn=nn.CrossEntropyLoss(),
                          train_metrics=["loss"], valid_metrics=[], epochs=1, batch_size=batch, seed=0,
                          device="cpu", log_every_n_steps=10, callbacks=[clock], checkpointer=ckpt)
        assert learner.fit(ds).exit_code == 0
    return marks[steps] - marks[10], stalls, (sizes[0] if sizes else 0)


def copy_time(hidden: int) -> float:
    model, _, _ = build(hidden, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, 784)).sum().backward()
    opt.step()  # the optimizer state exists, as in training
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        snapshot({"model": model.state_dict(), "optimizers": [opt.state_dict()]})
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    without, with_ckpt, reported = [], [], []
    n_ckpt, size = 0, 0
    for _ in range(args.repeats):
        without.append(timed_run(args.hidden, args.steps, 0)[0])
        t, stalls, size = timed_run(args.hidden, args.steps, args.every)
        with_ckpt.append(t)
        reported += stalls
        n_ckpt = sum(1 for s in range(10, args.steps) if s % args.every == 0)  # checkpoints inside the window
    copy = copy_time(args.hidden)
    stall = (statistics.median(with_ckpt) - statistics.median(without)) / max(1, n_ckpt)
    print(f"torch {torch.__version__}, {args.threads} thread(s); MLP 784-{args.hidden}-{args.hidden}-10 + AdamW, "
          f"checkpoint {size / 1e6:.1f} MB every {args.every} steps, median of {args.repeats}")
    print(f"copy of the state to CPU memory : {copy * 1e3:8.1f} ms")
    print(f"loop stall per checkpoint        : {stall * 1e3:8.1f} ms  ({stall / copy:.2f}x the copy; target <= 1.2x)")
    print(f"stall the learner reports (copy) : {statistics.median(reported) * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
