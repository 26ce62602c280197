"""Per-step time of tuitrain (headless, with its run directory) against a hand-written PyTorch loop.

Same model, data, batch size and steps; the two are interleaved in one process and the median of
several repeats is reported. Time is measured between two logged steps (after a warm-up), so setup
and the final checkpoint are left out of both.

    python benchmarks/bench_loop.py [--steps 3000] [--repeats 5] [--model tiny|medium|both]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuitrain.core.events import MetricsLogged  # noqa: E402
from tuitrain.core.learner import CoreLearner  # noqa: E402
from tuitrain.core.sections import Checkpointing  # noqa: E402
from tuitrain.sinks.console import HeadlessConsole  # noqa: E402
from tuitrain.sinks.standard import standard_sinks  # noqa: E402

MODELS = {"tiny": (32, 64, 10, 32), "medium": (784, 1024, 10, 128)}  # in, hidden, out, batch
WARMUP = 200


def make(kind: str, steps: int, seed: int = 0):
    d_in, hidden, d_out, batch = MODELS[kind]
    g = torch.Generator().manual_seed(seed)
    n = batch * steps
    x = torch.randn(n, d_in, generator=g)
    y = torch.randint(0, d_out, (n,), generator=g)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))
    return model, TensorDataset(x, y), batch


def hand_loop(kind: str, steps: int) -> float:
    model, ds, batch = make(kind, steps)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(ds, batch_size=batch, shuffle=True)
    t0 = None
    for i, (x, y) in enumerate(loader, start=1):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i % 10 == 0:
            loss.item()  # what a hand-written loop prints now and then
        if i == WARMUP:
            t0 = time.perf_counter()
    return (time.perf_counter() - t0) / (steps - WARMUP)


def tuitrain_loop(kind: str, steps: int) -> float:
    model, ds, batch = make(kind, steps)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    marks = {}

    def clock(event, state):
        if isinstance(event, MetricsLogged) and event.step in (WARMUP, steps):
            marks[event.step] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        callbacks = standard_sinks(run_dir) + [HeadlessConsole(stream=io.StringIO(), err=io.StringIO()), clock]
        for cb in callbacks[:-1]:
            cb.step_events = False
        clock.step_events = False
        learner = CoreLearner(
            model,
            opt,
            loss_fn=nn.CrossEntropyLoss(),
            train_metrics=["loss"],
            valid_metrics=[],
            epochs=1,
            batch_size=batch,
            shuffle=True,
            seed=0,
            device="cpu",
            log_every_n_steps=10,
            callbacks=callbacks,
            checkpoint=Checkpointing(model_path=str(run_dir / "model.pt")),
            run_dir=run_dir,
        )
        result = learner.fit(ds)
        assert result.exit_code == 0, result.error
    return (marks[steps] - marks[WARMUP]) / (steps - WARMUP)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", choices=["tiny", "medium", "both"], default="both")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    kinds = ["tiny", "medium"] if args.model == "both" else [args.model]
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} steps, median of {args.repeats}")
    print(f"{'model':8} {'hand-written':>14} {'tuitrain':>12} {'ratio':>7}")
    for kind in kinds:
        steps = args.steps if kind == "tiny" else max(WARMUP + 100, args.steps // 5)
        hand, ours = [], []
        for _ in range(args.repeats):  # interleaved, so drift hits both alike
            hand.append(hand_loop(kind, steps))
            ours.append(tuitrain_loop(kind, steps))
        h, t = statistics.median(hand), statistics.median(ours)
        print(f"{kind:8} {h * 1e6:11.1f} µs {t * 1e6:9.1f} µs {t / h:6.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
