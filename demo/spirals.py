"""Two (or more) interleaved spirals: a small classification problem for a small MLP.

Plain PyTorch, no tuitrain imports: this is the kind of module a user writes.
``datasets`` is the ``[data] target`` and ``SpiralNet`` the ``[model] target`` of spirals.toml.
"""

import math

import torch
from torch import nn
from torch.utils.data import TensorDataset


def make_spirals(n=4000, classes=2, turns=1.75, noise=0.15, seed=0):
    """``n`` points on ``classes`` interleaved spiral arms, deterministic for a given seed.

    Returns ``(x, y)``: float32 points of shape (n, 2) and int64 labels of shape (n,).
    The arms go round ``turns`` times; ``noise`` is Gaussian jitter in the same units as the
    spiral radius (which grows from 0 to 3).
    """
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    t = torch.rand(n, generator=g, dtype=torch.float64)  # position along the arm, 0..1
    radius = 3.0 * t
    angle = t * turns * 2 * math.pi + y.double() * (2 * math.pi / classes)
    x = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    x = x + noise * torch.randn(n, 2, generator=g, dtype=torch.float64)
    perm = torch.randperm(n, generator=g)
    return x[perm].float(), y[perm]


def datasets(n=4000, classes=2, turns=1.75, noise=0.15, seed=0, valid_fraction=0.2):
    """``(train, valid)`` TensorDatasets of spiral points, split by ``valid_fraction``."""
    x, y = make_spirals(n=n, classes=classes, turns=turns, noise=noise, seed=seed)
    n_valid = int(round(n * valid_fraction))
    train = TensorDataset(x[n_valid:], y[n_valid:])
    valid = TensorDataset(x[:n_valid], y[:n_valid])
    return train, valid


class SpiralNet(nn.Module):
    """An MLP: ``depth`` hidden layers of width ``hidden`` with SiLU, then ``classes`` logits."""

    def __init__(self, hidden=64, depth=3, dropout=0.0, classes=2, in_features=2):
        super().__init__()
        layers = []
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.SiLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = hidden
        layers.append(nn.Linear(width, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)
