"""A small convolutional autoencoder on coloured shapes that it draws itself (nothing is downloaded).

Plain PyTorch, no tuitrain imports. ``datasets`` is the ``[data] target`` of autoencoder.toml,
``AutoEncoder`` the ``[model] target`` (it defines ``train_step``/``valid_step``: the loss is its own
mean squared error, and ``psnr`` a metric of the same step), and ``samples`` the ``[log] samples``
target: a few shapes above what the model makes of them.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

KINDS = ("disc", "square", "ring", "triangle", "plus")


def hues_to_rgb(hue, value):
    """Fully saturated colours: ``hue`` in [0, 1) and ``value`` in [0, 1], each (N,), as (N, 3)."""
    k = (torch.tensor([5.0, 3.0, 1.0]) + hue[:, None] * 6) % 6
    return value[:, None] * (1 - torch.clamp(torch.minimum(k, 4 - k), 0, 1))


def shapes(n, size=16, seed=0):
    """``n`` images (n, 3, size, size) in [0, 1]: one shape each (a disc, a square, a ring, a triangle or
    a plus), of a random kind, place, size and colour, on a dark background."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, 6, generator=g)
    kind = torch.randint(len(KINDS), (n,), generator=g)
    r = (0.18 + 0.17 * u[:, 0]) * size  # half the shape's width
    cx = r + (size - 2 * r) * u[:, 1]  # placed wholly inside the image
    cy = r + (size - 2 * r) * u[:, 2]
    colour = hues_to_rgb(u[:, 3], 0.6 + 0.4 * u[:, 4])
    yy, xx = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    dx = xx[None] - cx[:, None, None]  # (n, size, size): each pixel's offset from its image's centre
    dy = yy[None] - cy[:, None, None]
    r = r[:, None, None]
    dist = torch.sqrt(dx * dx + dy * dy)
    masks = torch.stack(
        [
            dist <= r,  # disc
            (dx.abs() <= r * 0.85) & (dy.abs() <= r * 0.85),  # square
            (dist <= r) & (dist >= r * 0.55),  # ring
            (dy <= r * 0.8) & (dx.abs() <= (dy + r) * 0.55),  # triangle, point up
            ((dx.abs() <= r / 3) & (dy.abs() <= r)) | ((dy.abs() <= r / 3) & (dx.abs() <= r)),  # plus
        ],
        dim=1,
    )
    mask = masks[torch.arange(n), kind].float()
    background = 0.08 * u[:, 5, None, None, None]
    return background + (colour[:, :, None, None] - background) * mask[:, None]


def datasets(n=8192, size=16, seed=0, valid_fraction=0.125):
    """``(train, valid)`` TensorDatasets of shape images (one tensor per item)."""
    images = shapes(n, size, seed)
    n_valid = int(round(n * valid_fraction))
    return TensorDataset(images[n_valid:]), TensorDataset(images[:n_valid])


class AutoEncoder(nn.Module):
    """(N, 3, 16, 16) -> a code of ``latent`` numbers -> (N, 3, 16, 16), about in [0, 1]. The output is
    left linear (no sigmoid): a sigmoid saturated at the dark background stops learning there, and the
    model ends up drawing no shape at all."""

    def __init__(self, latent=24, width=32, size=16):
        super().__init__()
        if size % 4:
            raise ValueError(f"size ({size}) must be a multiple of 4")
        self.width, self.side = width, size // 4
        flat = 2 * width * self.side * self.side
        self.encoder = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(flat, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, flat),
            nn.ReLU(),
            nn.Unflatten(1, (2 * width, self.side, self.side)),
            nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(width, 3, 4, stride=2, padding=1),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def _step(self, batch):
        (x,) = batch
        x = x.to(self.decoder[0].weight.device)
        out = self(x)
        # peak signal-to-noise ratio of the batch as an image (clamped to [0, 1]), in dB: higher is
        # better, 20 dB is a typical error of 0.1
        shown = F.mse_loss(out.detach().clamp(0, 1), x)
        return {"loss": F.mse_loss(out, x), "psnr": -10 * torch.log10(shown), "items": x.shape[0]}

    def train_step(self, batch):
        return self._step(batch)

    def valid_step(self, batch):
        return self._step(batch)


def side_by_side(inputs, outputs, pad=1):
    """Inputs above their reconstructions, (N, 3, H, W) each, as one (3, 2H + pad, N(W + pad) - pad) image
    with a grey line between the two rows."""
    n, c, h, w = inputs.shape
    img = torch.full((c, 2 * h + pad, n * (w + pad) - pad), 0.35)
    for i in range(n):
        x = i * (w + pad)
        img[:, :h, x : x + w] = inputs[i]
        img[:, h + pad :, x : x + w] = outputs[i]
    return img


def samples(model, step, n=8, size=16):
    """[log] samples target = "autoencoder:samples": ``n`` shapes (the same ones every time, drawn apart
    from the training data) above the model's reconstructions of them."""
    device = next(model.parameters()).device
    inputs = shapes(n, size, seed=1_000_003)
    return side_by_side(inputs, model(inputs.to(device)).float().cpu().clamp(0, 1))
