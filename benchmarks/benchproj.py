"""The benchmarks' user project: an MLP and random classification data (no tuitrain imports)."""

import atexit
import os
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset


class Net(nn.Module):
    def __init__(self, d_in=32, hidden=64, d_out=10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))

    def forward(self, x):
        return self.body(x)


def datasets(n=96000, d_in=32, d_out=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    y = torch.randint(0, d_out, (n,), generator=g)
    return TensorDataset(x, y), None


class WholeBatches(torch.utils.data.Dataset):
    """A hand-written loop's own whole-batch fetch of a TensorDataset (one index_select per tensor),
    as tuitrain fetches one: with it, a hand-written loop and tuitrain differ by their loops alone."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return self.dataset[i]

    def __getitems__(self, indices):
        rows = torch.as_tensor(indices)
        return [t.index_select(0, rows) for t in self.dataset.tensors]


def whole_batch(batch):
    """collate_fn for WholeBatches: the batch comes collated."""
    return batch


class Baton:
    """Lockstep with a second process (see bench_lockstep.py): before every `turn`-th forward pass
    this process hands the turn over through one pipe and waits for it on another. Only its own
    turns are timed: the two processes alternate every few tenths of a second, so drifts in the
    machine's speed fall on both alike."""

    def __init__(self, spec: str) -> None:
        rfd, wfd, turn, skip, out = spec.split(",", 4)
        self.rfd, self.wfd, self.turn, self.skip, self.out = int(rfd), int(wfd), int(turn), int(skip), out
        self.calls = 0
        self.times: list[float] = []
        self.t0 = 0.0
        self.free = False  # the other process has ended: no more waiting
        self.second = os.environ.get("BENCH_BATON_SECOND") == "1"  # waits for the turn before its first
        atexit.register(self.save)

    def save(self) -> None:
        with open(self.out, "w") as f:
            f.write(" ".join(repr(t) for t in self.times[self.skip :]))

    def before_forward(self) -> None:
        c = self.calls
        self.calls = c + 1
        if c % self.turn:
            return
        now = time.perf_counter()
        if c:
            self.times.append(now - self.t0)
            if not self.free:
                os.write(self.wfd, b"x")
        if not self.free and (c or self.second):
            self.free = os.read(self.rfd, 1) == b""
        self.t0 = time.perf_counter()


class LockstepNet(Net):
    """`Net` taking turns with another process (BENCH_BATON=rfd,wfd,turn,skip,outfile)."""

    def __init__(self, d_in=32, hidden=64, d_out=10):
        super().__init__(d_in, hidden, d_out)
        self.baton = Baton(os.environ["BENCH_BATON"])

    def forward(self, x):
        self.baton.before_forward()
        return self.body(x)


def samples64(model, step):
    """bench_media's `[log] samples`: the first layer's first 64 filters as a grid of 28x28 images (the
    medium model's 784 inputs), and a line of text."""
    w = model.body[0].weight[:64]
    side = int(w.shape[1] ** 0.5)
    w = w[:, : side * side].reshape(-1, 1, side, side)
    lo, hi = w.amin(dim=(1, 2, 3), keepdim=True), w.amax(dim=(1, 2, 3), keepdim=True)
    return {"filters": (w - lo) / (hi - lo + 1e-12), "note": f"step {step}: mean |w| {w.abs().mean():.5f}"}
