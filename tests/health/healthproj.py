"""A user's project for tests/health: a linear regression whose data can be made hostile.

`datasets(...)` takes the trouble to inject: `scale_at` (the items of one batch multiplied by
`scale`, as a corrupt shard would be), `nan_at` (one item of NaN), `sleep_at` (an item that takes
`sleep` seconds to load: a network read that hangs). Items are found by index, with shuffle off.
"""

import math
import time

import torch
from torch import nn
from torch.utils.data import Dataset

DIM = 8


class Regression(Dataset):
    def __init__(self, n, seed, scale_at=(), scale=300.0, nan_at=-1, sleep_at=-1, sleep=0.0, drop=(), slow=0.0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, DIM, generator=g)
        w = torch.arange(1.0, DIM + 1).div(DIM)
        self.y = self.x @ w + 0.1 * torch.randn(n, generator=torch.Generator().manual_seed(seed + 1))
        for i in scale_at:
            self.x[i] *= scale
        if nan_at >= 0:
            self.x[nan_at, 0] = math.nan
        self.sleep_at, self.sleep, self.slow = sleep_at, sleep, slow
        if drop:
            keep = [i for i in range(n) if i not in set(drop)]
            self.x, self.y = self.x[keep], self.y[keep]

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == self.sleep_at:
            time.sleep(self.sleep)
        if self.slow:
            time.sleep(self.slow)
        return self.x[i], self.y[i].reshape(1)


def datasets(
    n=2048, batch_size=16, scale_batch=-1, scale=300.0, nan_item=-1, sleep_item=-1, sleep=0.0, drop_batch=-1, slow=0.0
):
    """`drop_batch`: that batch's items left out of the data altogether (what a skip should equal);
    `slow`: seconds every item takes to load (starved data)."""
    scale_at = range(scale_batch * batch_size, (scale_batch + 1) * batch_size) if scale_batch >= 0 else ()
    drop = range(drop_batch * batch_size, (drop_batch + 1) * batch_size) if drop_batch >= 0 else ()
    train = Regression(
        n, 0, scale_at=scale_at, scale=scale, nan_at=nan_item, sleep_at=sleep_item, sleep=sleep, drop=drop, slow=slow
    )
    return train, Regression(256, 100)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x):
        return self.layers(x)


# the project's health.toml, `{runs}` where its runs go (tests/health, benchmarks/gpu/checks.py)
CONFIG = """
[experiment]
name = "health"
dir = "{runs}"
seed = 0
[model]
target = "healthproj:Net"
[data]
target = "healthproj:datasets"
batch_size = 16
shuffle = false
[loss]
target = "torch.nn:MSELoss"
[optimizer]
target = "torch.optim:SGD"
lr = 0.02
[train]
epochs = 1
[metrics]
train = ["loss", "grad_norm"]
valid = ["loss"]
[log]
every_n_steps = 10
[checkpoint]
every_n_steps = 50
"""
