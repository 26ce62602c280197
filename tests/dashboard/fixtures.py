"""A recorded run, built from the event dataclasses with fixed times: what the dashboard tests
replay (as a list, or written to events.jsonl for `run_watch`)."""

from __future__ import annotations

from pathlib import Path

from tuitrain.core.events import (
    CheckpointDeleted,
    CheckpointSaved,
    CheckpointStarted,
    ControlReceived,
    DevicesSampled,
    EpochCompleted,
    EpochStarted,
    Event,
    MetricsLogged,
    OutputPrinted,
    PhaseCompleted,
    PhaseStarted,
    RunFailed,
    RunFinished,
    RunStarted,
    StepCompleted,
)

T0 = 1_700_000_000.0  # fixed clock: snapshots and ages do not depend on when tests run
MB = 1 << 20


def devices(t: float, cpu: float = 37.5) -> DevicesSampled:
    return DevicesSampled(
        cpu=cpu,
        cpu_per_core=[cpu - 10, cpu + 10],
        memory=42.0,
        memory_used=6 * 1024 * MB,
        memory_total=16 * 1024 * MB,
        rss=512 * MB,
        gpus=[
            {
                "index": 0,
                "name": "Fake A100",
                "util": 91.0,
                "mem_used": 30 * 1024 * MB,
                "mem_total": 80 * 1024 * MB,
                "temp": 64.0,
                "power": 250.0,
                "torch_allocated": 20 * 1024 * MB,
            }
        ],
        time=t,
    )


def recorded_run(
    epochs: int = 3,
    steps_per_epoch: int = 20,
    total_epochs: int | None = None,
    end: str = "completed",
    step_events: bool = False,
    spike_at: int | None = None,
) -> list[Event]:
    """A run of `epochs` epochs; `end`: "completed", "interrupted", "failed" or "running" (no end).

    Loss falls as 2/(1+step/10); valid loss is a little above it; checkpoints every epoch, keep 2,
    the best by valid/loss (epoch 2 is made the best: epoch 3's valid loss goes up).
    """
    total_epochs = total_epochs or epochs
    ev: list[Event] = []
    t = T0
    ev.append(
        RunStarted(
            run_dir="runs/spirals/20240101-000000",
            experiment="spirals",
            epochs=total_epochs,
            max_steps=0,
            steps_per_epoch=steps_per_epoch,
            batch_size=32,
            pid=4242,
            config={"checkpoint": {"monitor": "valid/loss", "mode": "min"}, "train": {"validate_every": 1}},
            time=t,
        )
    )
    step = 0
    saved: list[str] = []
    for epoch in range(1, epochs + 1):
        ev.append(EpochStarted(epoch=epoch, epochs=total_epochs, step=step, time=t))
        ev.append(PhaseStarted(phase="train", split="train", epoch=epoch, step=step, batches=steps_per_epoch, time=t))
        for b in range(steps_per_epoch):
            step += 1
            t += 0.5
            loss = 2.0 / (1 + step / 10)
            if spike_at == step:
                loss = 50.0
            if step_events:
                ev.append(StepCompleted(phase="train", epoch=epoch, step=step, batch=b, items=32, time=t))
            ev.append(
                MetricsLogged(
                    split="train",
                    epoch=epoch,
                    step=step,
                    batch=b + 1,
                    batches=steps_per_epoch,
                    metrics={"loss": loss, "accuracy": 1 - loss / 4, "lr": 0.003},
                    time=t,
                )
            )
        ev.append(OutputPrinted(text=f"epoch {epoch}: training done", time=t))
        ev.append(
            PhaseCompleted(
                phase="train",
                split="train",
                epoch=epoch,
                step=step,
                metrics={},
                duration=steps_per_epoch * 0.5,
                items=steps_per_epoch * 32,
                time=t,
            )
        )
        ev.append(devices(t))
        ev.append(PhaseStarted(phase="valid", split="valid", epoch=epoch, step=step, batches=5, time=t))
        t += 2.0
        vloss = 2.4 / (1 + step / 10) if epoch != 3 else 1.5
        ev.append(
            MetricsLogged(
                split="valid",
                epoch=epoch,
                step=step,
                scope="epoch",
                batch=5,
                batches=5,
                metrics={"loss": vloss, "accuracy": 1 - vloss / 4},
                time=t,
            )
        )
        ev.append(
            PhaseCompleted(
                phase="valid",
                split="valid",
                epoch=epoch,
                step=step,
                metrics={"loss": vloss},
                duration=2.0,
                items=160,
                time=t,
            )
        )
        metrics = {"train/loss": loss, "valid/loss": vloss}
        ev.append(
            EpochCompleted(
                epoch=epoch, epochs=total_epochs, step=step, metrics=metrics, duration=steps_per_epoch * 0.5 + 2, time=t
            )
        )
        ev.append(CheckpointStarted(epoch=epoch, step=step, reason="epoch", time=t))
        t += 0.5
        file = f"checkpoint/epoch-{epoch}.pt"
        ev.append(
            CheckpointSaved(
                file=file,
                epoch=epoch,
                step=step,
                metrics=metrics,
                bytes=3 * MB + epoch,
                best=epoch != 3,
                reason="epoch",
                stall=0.01,
                write=0.2,
                time=t,
            )
        )
        saved.append(file)
        if len(saved) > 2 and saved[0] != "checkpoint/epoch-2.pt":
            ev.append(CheckpointDeleted(file=saved.pop(0), time=t))
    summary = {
        "train/loss": {"min": 0.5, "min_epoch": epochs, "max": 1.9, "max_epoch": 1, "last": 0.5},
        "valid/loss": {"min": 0.6, "min_epoch": 2, "max": 1.6, "max_epoch": 1, "last": 1.5},
    }
    if end == "completed":
        ev.append(
            RunFinished(
                status="completed",
                exit_code=0,
                epoch=epochs,
                step=step,
                reason="epochs",
                duration=t - T0,
                summary=summary,
                best={"file": "checkpoint/epoch-2.pt", "monitor": "valid/loss", "value": 0.6},
                time=t,
            )
        )
    elif end == "interrupted":
        ev.append(ControlReceived(command="stop", source="dashboard", detail="quit", time=t))
        ev.append(
            RunFinished(
                status="interrupted",
                exit_code=130,
                epoch=epochs,
                step=step,
                reason="stopped",
                duration=t - T0,
                summary=summary,
                best={},
                time=t,
            )
        )
    elif end == "failed":
        ev.append(OutputPrinted(text="Traceback follows", stream="stderr", time=t))
        ev.append(
            RunFailed(
                error="ValueError: bad shape (3, 4)",
                epoch=epochs,
                step=step,
                duration=t - T0,
                traceback='Traceback (most recent call last):\n  File "spirals.py", line 12, in '
                "forward\n    raise ValueError('bad shape (3, 4)')\n"
                "ValueError: bad shape (3, 4)",
                time=t,
            )
        )
    return ev


def write_jsonl(path: Path, events: list[Event], partial_tail: str = "") -> Path:
    """events.jsonl as the jsonl sink writes it; `partial_tail` leaves a half-written last line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            if e.persistent:
                f.write(e.to_json() + "\n")
        f.write(partial_tail)
    return path


def last_time(events: list[Event]) -> float:
    return max(getattr(e, "time", T0) for e in events)
