"""The health corpus's user project (bench_health_corpus.py): small models and data sets made here, with
the faults a real run meets injected at a known step.

Data sets are found by index with shuffle off where a fault is placed, so batch `b` of the first epoch is
step `b + 1`. The faults:
- `scale_batch`, `scale`: one batch's inputs multiplied (a corrupt shard, a unit mix-up); for the
  classifier they are also paired with their neighbours' labels (scaled inputs alone make a ReLU
  classifier more sure of the classes it already gets right: its loss falls);
- `shuffle_batch`: one batch's labels shuffled among themselves (a mislabelled shard);
- `drift_from`, `drift`: from that batch on, the targets drift upward, a little more each batch (the data
  changes under the model: a slow rise, not a spike);
- `spike_lr(optimizer, at, factor)`: a scheduler whose lr is `factor` times the base for one step.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data import Dataset


def _batch_items(batch: int, batch_size: int) -> range:
    return range(batch * batch_size, (batch + 1) * batch_size) if batch >= 0 else range(0)


class Blobs(Dataset):
    """`classes` overlapping Gaussian clusters in `dim` dimensions (a classifier converges near, not at, 0)."""

    def __init__(
        self,
        n: int,
        classes: int = 4,
        dim: int = 16,
        seed: int = 0,
        spread: float = 1.2,
        batch_size: int = 16,
        scale_batch: int = -1,
        scale: float = 10.0,
        shuffle_batch: int = -1,
    ) -> None:
        g = torch.Generator().manual_seed(1234)  # the same clusters for every split
        centers = torch.randn(classes, dim, generator=g) * 1.5
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.x = centers[self.y] + spread * torch.randn(n, dim, generator=g)
        scaled = list(_batch_items(scale_batch, batch_size))
        if scaled:  # a corrupt shard: inputs scaled and paired with their neighbours' labels
            self.x[scaled] *= scale
            self.y[scaled] = self.y[scaled].roll(1)
        items = list(_batch_items(shuffle_batch, batch_size))
        if items:
            labels = self.y[items]
            self.y[items] = (labels + 1 + torch.randint(0, classes - 1, (len(items),), generator=g)) % classes

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class Regression(Dataset):
    """y = x . w + noise, with a fault where asked."""

    def __init__(
        self,
        n: int,
        dim: int = 8,
        seed: int = 0,
        noise: float = 0.1,
        batch_size: int = 16,
        scale_batch: int = -1,
        scale: float = 10.0,
        drift_from: int = -1,
        drift: float = 0.0,
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        w = torch.arange(1.0, dim + 1).div(dim)
        self.y = (self.x @ w + noise * torch.randn(n, generator=g)).unsqueeze(1)
        for i in _batch_items(scale_batch, batch_size):
            self.x[i] *= scale
        if drift_from >= 0:
            start = drift_from * batch_size
            self.y[start:] += drift * torch.arange(n - start, dtype=torch.float32).div(batch_size).unsqueeze(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def blobs(n: int = 8000, valid: int = 1000, batch_size: int = 16, **fault):
    return Blobs(n, batch_size=batch_size, **fault), Blobs(valid, seed=99, batch_size=batch_size)


def regression(n: int = 4096, valid: int = 512, batch_size: int = 16, **fault):
    return Regression(n, batch_size=batch_size, **fault), Regression(valid, seed=99, batch_size=batch_size)


class MLP(nn.Module):
    def __init__(self, inputs: int = 16, hidden: int = 64, outputs: int = 4, depth: int = 2) -> None:
        super().__init__()
        layers, width = [], inputs
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        self.layers = nn.Sequential(*layers, nn.Linear(width, outputs))

    def forward(self, x):
        return self.layers(x)


def spike_lr(optimizer, at: int, factor: float = 100.0):
    """The lr times `factor` for the update of step `at` (1-based) alone."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: factor if s == at - 1 else 1.0)


def warmup_cosine(optimizer, warmup: int, total: int):
    """Linear warm-up over `warmup` steps, then a cosine to 0 at `total`."""

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, total - warmup))))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
