"""A small GAN that learns a ring of 8 Gaussians in 2-D: two models, two optimizers, custom phases.

``datasets`` is the ``[data] target`` of gan.toml, ``Generator``/``Discriminator`` the targets of
``[model.generator]``/``[model.discriminator]``, and ``GANPhase``/``GANValidPhase`` the
``[train] phase``/``valid_phase``. The phases are the only tuitrain-specific code. ``samples`` is the
``[log] samples`` target: a picture of generated points against the ring, drawn here with torch alone.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from tuitrain import CustomTrainPhase, ValidPhase


def ring_modes(modes=8, radius=2.0):
    """The centres of the mixture: ``modes`` points evenly spaced on a circle, shape (modes, 2)."""
    angle = torch.arange(modes, dtype=torch.float32) * (2 * math.pi / modes)
    return radius * torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)


def datasets(n=8192, modes=8, radius=2.0, std=0.05, seed=0, valid_fraction=0.125):
    """``(train, valid)`` TensorDatasets of points drawn from the ring mixture (one tensor per item)."""
    g = torch.Generator().manual_seed(seed)
    centres = ring_modes(modes, radius)
    x = centres[torch.randint(modes, (n,), generator=g)] + std * torch.randn(n, 2, generator=g)
    n_valid = int(round(n * valid_fraction))
    return TensorDataset(x[n_valid:]), TensorDataset(x[:n_valid])


def mlp(n_in, n_out, hidden, depth):
    layers, width = [], n_in
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.LeakyReLU(0.2)]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, n_out))


class Generator(nn.Module):
    """Noise of ``latent`` dimensions -> a 2-D point."""

    def __init__(self, latent=8, hidden=128, depth=3):
        super().__init__()
        self.latent = latent
        self.net = mlp(latent, 2, hidden, depth)

    def forward(self, z):
        return self.net(z)

    def sample(self, n, device=None):
        return self(torch.randn(n, self.latent, device=device))


class Discriminator(nn.Module):
    """A 2-D point -> one logit (real > 0)."""

    def __init__(self, hidden=128, depth=3):
        super().__init__()
        self.net = mlp(2, 1, hidden, depth)

    def forward(self, x):
        return self.net(x).squeeze(-1)


def bce(logits, real: bool):
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, 1.0 if real else 0.0))


class GANPhase(CustomTrainPhase):
    """One discriminator step, then one generator step (the non-saturating loss), per batch."""

    def step(self, learner, batch):
        (real,) = batch
        G, D = learner.models["generator"], learner.models["discriminator"]
        learner.zero_grad()  # the generator's step left gradients in D as well
        fake = G.sample(real.shape[0], real.device)
        d_loss = bce(D(real), True) + bce(D(fake.detach()), False)
        learner.backward(d_loss)
        learner.step_optimizer("discriminator")
        g_loss = bce(D(fake), True)
        learner.backward(g_loss)
        learner.step_optimizer("generator")
        return {
            "loss": (d_loss + g_loss).detach(),
            "d_loss": d_loss.detach(),
            "g_loss": g_loss.detach(),
            "items": real.shape[0],
        }


class GANValidPhase(ValidPhase):
    """Sample quality: the mean distance from generated points to the nearest mode, and how many of the
    modes the samples reach (within 4 standard deviations); loss is the discriminator's loss."""

    modes, radius, std = 8, 2.0, 0.05

    def step(self, learner, batch):
        (real,) = batch
        G, D = learner.models["generator"], learner.models["discriminator"]
        fake = G.sample(real.shape[0], real.device)
        dist = torch.cdist(fake, ring_modes(self.modes, self.radius).to(fake.device))
        nearest, which = dist.min(dim=1)
        close = nearest < 4 * self.std
        covered = torch.zeros(self.modes, device=fake.device).index_add_(
            0, which[close], torch.ones_like(nearest[close])
        )
        d_loss = bce(D(real), True) + bce(D(fake), False)
        return {
            "loss": d_loss,
            "mode_distance": nearest.mean(),
            "modes_covered": (covered > 0).sum().float(),
            "items": real.shape[0],
        }


RING = (45, 55, 85)  # the ring and its modes, faint
POINTS = (255, 190, 60)  # generated points, brighter where more fall on a pixel


def draw(img, points, colour, extent):
    """Adds ``colour`` into the (3, H, W) uint8 ``img`` at each point of ``points`` (N, 2), the square
    -extent..extent mapped onto the image (y up); more points on a pixel make it brighter (saturating)."""
    size = img.shape[-1]
    cols = ((points[:, 0] + extent) / (2 * extent) * size).floor().long()
    rows = ((extent - points[:, 1]) / (2 * extent) * size).floor().long()
    inside = (cols >= 0) & (cols < size) & (rows >= 0) & (rows < size)
    hits = torch.bincount(rows[inside] * size + cols[inside], minlength=size * size).view(size, size)
    weight = (hits.float() / 2).clamp(max=1.0)  # two points on a pixel: full colour
    shade = torch.tensor(colour, dtype=torch.float32).view(3, 1, 1) * weight
    img.copy_((img.float() + shade).clamp(max=255).to(torch.uint8))


def picture(points, modes=8, radius=2.0, size=128, extent=3.0):
    """Generated ``points`` (N, 2) against the ring of ``modes`` Gaussians: a (3, size, size) uint8 image."""
    img = torch.zeros(3, size, size, dtype=torch.uint8)
    angle = torch.linspace(0, 2 * math.pi, 8 * size)
    draw(img, radius * torch.stack([torch.cos(angle), torch.sin(angle)], dim=1), RING, extent)
    centres = ring_modes(modes, radius)
    around = torch.tensor([[dx, dy] for dx in (-1, 0, 1) for dy in (-1, 0, 1)], dtype=torch.float32)
    draw(img, (centres[:, None, :] + around * (extent / size)).reshape(-1, 2), RING, extent)  # 3x3 dots
    draw(img, points.float().cpu(), POINTS, extent)
    return img


def samples(model, step, n=2048, modes=8, radius=2.0):
    """[log] samples target = "gan:samples": ``n`` points from the generator (the same noise each
    time, so the pictures of a run show the generator change) drawn against the ring."""
    G = model["generator"]  # several models reach the function as one ModuleDict
    z = torch.randn(n, G.latent, generator=torch.Generator().manual_seed(0)).to(next(G.parameters()).device)
    return picture(G(z), modes, radius)
