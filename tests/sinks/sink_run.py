"""A realistic, hand-built event sequence of a two-epoch run, shared by the sink tests
(a plain module, not a conftest, so its name cannot clash with other test folders)."""

from __future__ import annotations

import os

from tuitrain.core.events import (
    CheckpointDeleted,
    CheckpointSaved,
    CheckpointStarted,
    EpochCompleted,
    EpochStarted,
    MetricsLogged,
    OutputPrinted,
    PhaseCompleted,
    PhaseStarted,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepStarted,
)

T0 = 1_700_000_000.0
STEPS = 4  # optimizer steps per epoch
LOSSES = {1: [2.5, 1.25, 0.1 + 0.2, 1e-7], 2: [0.5, 0.25, 0.125, 1 / 3]}
ACC = {1: [0.25, 0.5, 0.75, 0.875], 2: [0.875, 0.9375, 1.0, 0.96875]}
VALID = {1: {"loss": 0.7, "accuracy": 0.6}, 2: {"loss": 0.1 + 0.2, "accuracy": 0.8}}
SUMMARY = {
    "train/loss": {"min": 1e-7, "min_epoch": 1, "max": 2.5, "max_epoch": 1, "last": 1 / 3},
    "train/accuracy": {"min": 0.25, "min_epoch": 1, "max": 1.0, "max_epoch": 2, "last": 0.96875},
    "valid/loss": {"min": 0.1 + 0.2, "min_epoch": 2, "max": 0.7, "max_epoch": 1, "last": 0.1 + 0.2},
    "valid/accuracy": {"min": 0.6, "min_epoch": 1, "max": 0.8, "max_epoch": 2, "last": 0.8},
}
BEST = {"file": "checkpoint/epoch-2.pt", "monitor": "valid/loss", "value": 0.1 + 0.2}


def run_events(run_dir, resumed_from: str = "", start_epoch: int = 1) -> list:
    """RunStarted ... RunFinished for epochs start_epoch..2, with times one second apart."""
    clock = iter(T0 + i for i in range(10_000))
    step = (start_epoch - 1) * STEPS
    ev = [
        RunStarted(
            run_dir=str(run_dir),
            experiment="spirals",
            epochs=2,
            max_steps=0,
            steps_per_epoch=STEPS,
            batch_size=32,
            start_epoch=start_epoch,
            start_step=step,
            resumed_from=resumed_from,
            pid=os.getpid(),
            env={"python": "3.11.4", "torch": "2.13.0", "devices": ["cpu"]},
            config={"checkpoint": {"monitor": "valid/loss", "mode": "min"}},
            time=next(clock),
        )
    ]
    for epoch in range(start_epoch, 3):
        ev.append(EpochStarted(epoch=epoch, epochs=2, step=step, time=next(clock)))
        ev.append(PhaseStarted(phase="train", split="train", epoch=epoch, step=step, batches=STEPS, time=next(clock)))
        for b in range(STEPS):
            ev.append(StepStarted(phase="train", epoch=epoch, step=step + 1, batch=b, time=next(clock)))
            step += 1
            ev.append(StepCompleted(phase="train", epoch=epoch, step=step, batch=b, items=32, time=next(clock)))
            ev.append(
                MetricsLogged(
                    split="train",
                    epoch=epoch,
                    step=step,
                    metrics={"loss": LOSSES[epoch][b], "accuracy": ACC[epoch][b]},
                    batch=b + 1,
                    batches=STEPS,
                    time=next(clock),
                )
            )
        train = {"loss": sum(LOSSES[epoch]) / STEPS, "accuracy": sum(ACC[epoch]) / STEPS}
        ev.append(
            MetricsLogged(
                split="train",
                epoch=epoch,
                step=step,
                metrics=train,
                scope="epoch",
                batch=STEPS,
                batches=STEPS,
                time=next(clock),
            )
        )
        ev.append(
            PhaseCompleted(
                phase="train",
                split="train",
                epoch=epoch,
                step=step,
                metrics=train,
                duration=14.0,
                items=128,
                time=next(clock),
            )
        )
        ev.append(OutputPrinted(text=f"epoch {epoch} says hi\nsecond line", stream="stdout", time=next(clock)))
        ev.append(PhaseStarted(phase="valid", split="valid", epoch=epoch, step=step, batches=2, time=next(clock)))
        ev.append(
            MetricsLogged(
                split="valid",
                epoch=epoch,
                step=step,
                metrics=VALID[epoch],
                scope="epoch",
                batch=2,
                batches=2,
                time=next(clock),
            )
        )
        ev.append(
            PhaseCompleted(
                phase="valid",
                split="valid",
                epoch=epoch,
                step=step,
                metrics=VALID[epoch],
                duration=2.0,
                items=64,
                time=next(clock),
            )
        )
        metrics = {f"train/{k}": v for k, v in train.items()} | {f"valid/{k}": v for k, v in VALID[epoch].items()}
        ev.append(EpochCompleted(epoch=epoch, epochs=2, step=step, metrics=metrics, duration=20.0, time=next(clock)))
        ev.append(CheckpointStarted(epoch=epoch, step=step, reason="epoch", time=next(clock)))
        ev.append(
            CheckpointSaved(
                file=f"checkpoint/epoch-{epoch}.pt",
                epoch=epoch,
                step=step,
                metrics=metrics,
                bytes=2048,
                best=epoch == 2,
                reason="epoch",
                stall=0.01,
                write=0.25,
                time=next(clock),
            )
        )
    ev.append(CheckpointDeleted(file="checkpoint/epoch-0.pt", time=next(clock)))
    ev.append(
        RunFinished(
            status="completed",
            exit_code=0,
            epoch=2,
            step=step,
            reason="epochs",
            duration=45.0,
            summary=SUMMARY,
            best=BEST,
            time=next(clock),
        )
    )
    return ev


def feed(sink, events) -> None:
    for e in events:
        sink(e, None)
