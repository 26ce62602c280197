"""A Lightning user's script with TuitrainCallback, run (and imported) by tests/integrations/test_lightning.py.

    python fit.py --out DIR [--package lightning.pytorch|pytorch_lightning] [--devices 2] [--dashboard auto] ...

A tiny MLP on random tensors (64 items, batch 8: 8 steps an epoch in one process) that logs the way
Lightning's examples do: `train_loss` on steps, `train/acc` per epoch, `val_loss` and `acc/val` per
validation. After fit each rank writes DIR/rank-N.json: its final global step, the Lightning packages
loaded, the callback's base classes and, on rank 0, the exit codes of the ranks that Lightning's DDP
launcher started (it re-runs this script for them).
"""

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def module_class(L, on_epoch_too=False):
    """The LightningModule, for the package `L` (`lightning.pytorch` or `pytorch_lightning`);
    `on_epoch_too`: `train_loss` logged with on_step=True, on_epoch=True (Lightning adds _step/_epoch)."""

    class TinyNet(L.LightningModule):
        def __init__(self, lr=0.05, hidden=16, sleep=0.0):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 3))

        def training_step(self, batch, batch_idx):
            if self.hparams.sleep:
                time.sleep(self.hparams.sleep)
            x, y = batch
            out = self.net(x)
            loss = nn.functional.cross_entropy(out, y)
            self.log("train_loss", loss, on_step=True, on_epoch=on_epoch_too)
            self.log("train/acc", (out.argmax(1) == y).float().mean(), on_step=False, on_epoch=True)
            print(f"training step {self.global_step}")  # what a user prints: never over the dashboard
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            out = self.net(x)
            self.log("val_loss", nn.functional.cross_entropy(out, y))
            self.log("acc/val", (out.argmax(1) == y).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    return TinyNet


def loaders():
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g))
    return DataLoader(data, batch_size=8), DataLoader(data, batch_size=32)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--root", default="runs")
    parser.add_argument("--package", default="lightning.pytorch")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--max-epochs", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=0.0)  # seconds a training step takes at least
    parser.add_argument("--dashboard", default="false")
    args = parser.parse_args()

    L = importlib.import_module(args.package)
    from tuitrain.integrations.lightning import TuitrainCallback

    torch.manual_seed(0)
    dashboard = {"false": False, "true": True}.get(args.dashboard, args.dashboard)
    callback = TuitrainCallback(dashboard=dashboard, dir=args.root)
    ddp = dict(strategy="ddp", devices=args.devices) if args.devices > 1 else {}
    trainer = L.Trainer(
        max_epochs=args.max_epochs,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        accelerator="cpu",
        **ddp,
    )
    trainer.fit(module_class(L)(sleep=args.sleep), *loaders())
    report = {
        "global_step": trainer.global_step,
        "rank": trainer.global_rank,
        "modules": sorted(m for m in ("lightning", "pytorch_lightning") if m in sys.modules),
        "bases": [f"{b.__module__}.{b.__qualname__}" for b in type(callback).__mro__[1:]],
    }
    launcher = getattr(trainer.strategy, "launcher", None)
    report["children"] = [p.wait(timeout=120) for p in getattr(launcher, "procs", [])]
    Path(args.out, f"rank-{trainer.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
