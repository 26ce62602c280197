"""Logs written by the tools themselves, once a session, for the readers' tests (tests/sources): a
TensorBoard run by torch's SummaryWriter (scalars, a validation split, a tensor-style scalar, images,
texts, histograms, hparams and a hostile tag), the same by tensorboardX, and a Lightning run trained for
real with its TensorBoardLogger. A tool that does not install is a skip that says so."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

STEPS = 300
EVERY = 50  # validation, pictures, texts and histograms every this many steps
HOSTILE = "x" * 300 + "\x1b]0;owned\x07\x1b[2J"
HPARAMS = {"lr": 0.1, "batch": 32, "opt": "adam"}


def _log(w, hparams: bool = True, new_style: bool = True) -> None:
    rng = np.random.default_rng(0)
    for i in range(1, STEPS + 1):
        w.add_scalar("loss", 1.0 / i, i)
        w.add_scalar("lr", 0.1 * 0.99**i, i)
        if i % EVERY == 0:
            w.add_scalar("val_loss", 2.0 / i, i)
            w.add_scalar("accuracy/val", i / STEPS, i)
            w.add_histogram("weights/fc1", rng.normal(0, 1 + i / 100, 1000), i)
            w.add_image("samples", rng.integers(0, 255, (3, 8, 12), dtype=np.uint8), i)
            w.add_text("notes", f"step {i}: \x1b[31mred\x1b[0m", i)
        if new_style and i % 100 == 0:
            w.add_scalar("tensor_style", i * 0.5, i, new_style=True)
    w.add_scalar(HOSTILE, 1.0, 1)
    if hparams:
        w.add_hparams(dict(HPARAMS), {"hp/acc": 0.9})


@pytest.fixture(scope="session")
def summarywriter_run(tmp_path_factory) -> Path:
    """A run written by torch.utils.tensorboard.SummaryWriter."""
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path_factory.mktemp("tb") / "torch_run"
    w = SummaryWriter(str(folder))
    _log(w)
    w.close()
    return folder


@pytest.fixture(scope="session")
def tensorboardx_run(tmp_path_factory) -> Path:
    """The same by tensorboardX (skipped where it does not install)."""
    if importlib.util.find_spec("tensorboardX") is None:
        pytest.skip("tensorboardX is not installed (pip install tensorboardX): its files are not tested")
    from tensorboardX import SummaryWriter

    folder = tmp_path_factory.mktemp("tbx") / "tbx_run"
    w = SummaryWriter(str(folder))
    _log(w, new_style=False)
    w.close()
    return folder


@pytest.fixture(scope="session")
def lightning_run(tmp_path_factory) -> Path:
    """A tiny model trained two epochs by Lightning with its TensorBoardLogger: its version_0 folder."""
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed: its TensorBoardLogger's files are not tested")
    import lightning as L
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(L.LightningModule):
        def __init__(self, lr: float = 0.05, hidden: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, _):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    torch.manual_seed(0)
    x = torch.randn(256, 4)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    root = tmp_path_factory.mktemp("lightning")
    logger = TensorBoardLogger(str(root), name="tiny")
    trainer = L.Trainer(
        max_epochs=2,
        logger=logger,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
    )
    trainer.fit(Tiny(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=64))
    return Path(logger.log_dir)


def accumulator(folder: Path):
    """TensorBoard's own reader of a folder, keeping everything."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


def read_all(folder: Path, live: bool = False):
    """A finished run's events as the TensorBoard source says them, and the source."""
    from tuitrain.sources import tensorboard as tb

    (ref,) = [r for r in tb.find_runs(folder) if Path(r.path) == Path(folder)]
    events: list = []
    source = tb.open_source(ref, live=live)
    source.open(lambda e, s=None: events.append(e))
    source.read_to_end()
    return events, source
