"""The headless console's numbers and its last lines (issue 51): throughput with its unit and one
decimal at any size (it printed `throughput 485.1687` under 1000 and `1840.2` above), checkpoints at
the end named by absolute paths, and the last one saved said when it is not the best."""

import io
import os

from tuitrain.core.events import (
    CheckpointSaved,
    EpochCompleted,
    EpochStarted,
    MetricsLogged,
    PhaseStarted,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepStarted,
)
from tuitrain.sinks.console import HeadlessConsole, format_throughput


def console():
    out = io.StringIO()
    return HeadlessConsole(out, io.StringIO(), interval=0.0, clock=lambda: 0.0), out


def start(c, config=None):
    c(
        RunStarted(
            run_dir="runs/x/1",
            experiment="x",
            epochs=3,
            max_steps=0,
            steps_per_epoch=10,
            batch_size=8,
            config=config or {},
            time=0.0,
        )
    )
    c(EpochStarted(epoch=1, epochs=3, step=0, time=0.0))
    c(PhaseStarted(phase="train", split="train", epoch=1, step=0, batches=10, time=0.0))


def saved(file, epoch, step, best=False):
    return CheckpointSaved(
        file=file, epoch=epoch, step=step, metrics={}, bytes=1, best=best, reason="epoch", stall=0.0, write=0.0
    )


def test_format_throughput():
    assert format_throughput(485.1687) == "485.2 samples/s"
    assert format_throughput(27996.7359) == "27996.7 samples/s"
    assert format_throughput(123456789.0, "tokens") == "123456789.0 tokens/s"
    assert format_throughput(0.01234) == "0.0123 samples/s"
    assert format_throughput(None) == "None"


def test_progress_and_epoch_lines_give_throughput_its_unit():
    c, out = console()
    start(c, {"metrics": {"throughput_unit": "tokens"}})
    c(StepStarted(phase="train", epoch=1, step=1, batch=0, time=1.0))
    c(StepCompleted(phase="train", epoch=1, step=1, batch=0, items=8, time=1.0))
    c(
        MetricsLogged(
            split="train", epoch=1, step=1, metrics={"loss": 0.5, "throughput": 485.1687}, batch=1, batches=10, time=1.0
        )
    )
    c(
        EpochCompleted(
            epoch=1, epochs=3, step=10, metrics={"train/throughput": 1840.25, "train/loss": 0.5}, duration=2.0
        )
    )
    text = out.getvalue()
    assert "throughput 485.2 tokens/s" in text
    assert "train/throughput 1840.2 tokens/s" in text or "train/throughput 1840.3 tokens/s" in text
    assert "485.1687" not in text


def test_the_end_names_checkpoints_by_absolute_paths_and_the_last_one_saved():
    c, out = console()
    start(c)
    c(saved("checkpoint/epoch-0001.pt", 1, 10, best=True))
    c(saved("checkpoint/epoch-0002-step-00000013.pt", 2, 13))
    c(
        RunFinished(
            status="interrupted",
            exit_code=130,
            epoch=2,
            step=13,
            reason="stopped",
            duration=3.0,
            summary={},
            best={"file": "checkpoint/epoch-0001.pt", "monitor": "valid/loss", "value": 0.3},
        )
    )
    lines = out.getvalue().splitlines()
    run_dir = os.path.abspath("runs/x/1")
    assert lines[-2:] == [
        f"best checkpoint: {os.path.join(run_dir, 'checkpoint/epoch-0001.pt')} (valid/loss 0.3000)",
        f"last checkpoint: {os.path.join(run_dir, 'checkpoint/epoch-0002-step-00000013.pt')}",
    ]


def test_a_loop_of_ones_own_says_its_epoch_by_its_metrics_and_ends_completed():
    """Monitor and Lightning send no EpochStarted: the epoch of the logged metrics is the line's, and
    their `completed` end reads "training completed" (not "epoch 0/10", not "completed: completed")."""
    c, out = console()
    c(
        RunStarted(
            run_dir="runs/x/1", experiment="x", epochs=10, max_steps=80, steps_per_epoch=0, batch_size=8, time=0.0
        )
    )
    c(MetricsLogged(split="train", epoch=0, step=1, metrics={"loss": 1.0}, time=1.0))
    c(MetricsLogged(split="train", epoch=10, step=78, metrics={"loss": 0.5}, time=9.0))
    c(
        RunFinished(
            status="completed", exit_code=0, epoch=10, step=80, reason="completed", duration=9.0, summary={}, best={}
        )
    )
    lines = out.getvalue().splitlines()
    assert lines[1:3] == ["step 1/80 · loss 1.0000", "epoch 10/10 · step 78/80 · loss 0.5000"]
    assert "training completed" in lines and not any("epoch 0" in line for line in lines)
