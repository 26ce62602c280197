"""Per-step time of `tuitrain run --headless` against a hand-written loop in one process.

tuitrain trains `InprocNet` (the benchmarks' MLP); every `turn` forward calls, the model's forward
first runs `turn` steps of a hand-written loop on a model, optimizer and data of its own, and times
them. tuitrain's turns are timed between the hand-written ones. Both loops then share the process:
its allocator, its memory layout, its CPU and the same drift of the machine's speed, so what differs
is the loops' own work. The ratio of a run is the sum of tuitrain's timed turns over the
hand-written loop's; the figure is the median of runs.

Not the benchmark's verdict (bench_all judges the headless targets in lockstep, two processes): it
is the check that a difference lockstep shows belongs to the loop and not to one process's luck
(on the medium model both show tuitrain ~0.5-1 % slower). The hand-written turns run inside a
tuitrain step, between its batch and its forward pass, so each loop starts its turn with the other's
data in the CPU caches, as in lockstep.

    python benchmarks/bench_inproc.py [--repeats 4] [--model tiny|medium|both]
"""

from __future__ import annotations

import argparse
import ast
import atexit
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchproj  # noqa: E402

# model, steps per turn, turns (the first `skip` of each loop not timed)
SIZES = {
    "tiny": dict(d_in=32, hidden=64, batch=32, turn=400, turns=50, skip=8),
    "medium": dict(d_in=784, hidden=1024, batch=128, turn=40, turns=40, skip=8),
}


class InprocNet(benchproj.Net):
    """The MLP, with a hand-written loop's turns run from its forward pass (BENCH_INPROC:
    "turn,skip,batch,turns,out": `turns` the hand-written loop's data lasts for)."""

    def __init__(self, d_in=32, hidden=64, d_out=10):
        super().__init__(d_in, hidden, d_out)
        turn, skip, batch, turns, self.out = os.environ["BENCH_INPROC"].split(",", 4)
        self.turn, self.skip = int(turn), int(skip)
        self.calls = 0
        self.tuitrain_times: list[float] = []
        self.hand_times: list[float] = []
        self.t_end: float | None = None  # when the last hand-written turn ended
        # the hand-written loop: the same model, optimizer, loss, kind of data and fetch, its own copies
        g = torch.Generator().manual_seed(1)
        n = int(batch) * self.turn * int(turns)
        data = TensorDataset(torch.randn(n, d_in, generator=g), torch.randint(0, d_out, (n,), generator=g))
        self.h_model = benchproj.Net(d_in, hidden, d_out)
        self.h_opt = torch.optim.AdamW(self.h_model.parameters(), lr=1e-3)
        self.h_loss = nn.CrossEntropyLoss()
        # fetched whole, as tuitrain fetches a TensorDataset: the two differ by their loops alone
        self.h_batches = iter(
            DataLoader(
                benchproj.WholeBatches(data), batch_size=int(batch), shuffle=True, collate_fn=benchproj.whole_batch
            )
        )
        self.h_step = 0
        atexit.register(self.save)

    def save(self) -> None:
        with open(self.out, "w") as f:
            f.write(repr((self.tuitrain_times[self.skip :], self.hand_times[self.skip :])))

    def hand_turn(self) -> bool:
        model, opt, loss_fn = self.h_model, self.h_opt, self.h_loss
        for _ in range(self.turn):
            try:
                x, y = next(self.h_batches)
            except StopIteration:
                return False
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            self.h_step += 1
            if self.h_step % 10 == 0:
                loss.item()
        return True

    def forward(self, x):
        c = self.calls
        self.calls = c + 1
        if c % self.turn == 0:
            if self.t_end is not None:
                self.tuitrain_times.append(time.perf_counter() - self.t_end)
            t0 = time.perf_counter()
            with torch.enable_grad():
                full = self.hand_turn()
            t1 = time.perf_counter()
            if full:
                self.hand_times.append(t1 - t0)
            self.t_end = t1 if full else None
        return super().forward(x)


def inproc(kind: str, tmp: Path) -> tuple[float, float]:
    """One run: (tuitrain's seconds per step, the hand-written loop's)."""
    import bench_dashboard as steps_bench

    m = SIZES[kind]
    steps = m["turn"] * m["turns"]
    model = {k: m[k] for k in ("d_in", "hidden", "batch")}
    cfg = steps_bench.write_config(tmp, steps, model, "inproc.toml", "bench_inproc:InprocNet")
    out = tmp / f"inproc-{time.time_ns()}.txt"
    env = dict(steps_bench.env(), BENCH_INPROC=f"{m['turn']},{m['skip']},{m['batch']},{m['turns'] + 1},{out}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tuitrain",
            "run",
            str(cfg),
            "--headless",
            "--run-dir",
            str(tmp / f"run-{time.time_ns()}"),
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tt, hand = ast.literal_eval(out.read_text())
    n = min(len(tt), len(hand))
    return sum(tt[:n]) / (n * m["turn"]), sum(hand[:n]) / (n * m["turn"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--model", choices=["tiny", "medium", "both"], default="both")
    args = ap.parse_args(argv)
    from bench_lockstep import print_runs  # here: the model's module, imported by tuitrain, stays light

    kinds = list(SIZES) if args.model == "both" else [args.model]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            runs = [inproc(kind, Path(tmp)) for _ in range(args.repeats)]
            print_runs(kind, "tuitrain headless", "hand-written in the same process", runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
