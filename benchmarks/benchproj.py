"""The benchmarks' user project: an MLP and random classification data (no tuitrain imports)."""

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
